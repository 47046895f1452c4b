"""What keeps web pages out: the Host a request names, its Origin, and CORS for allowed pages.

A server on 127.0.0.1 is reachable from every page the user's browser opens. Two ways in
are closed here, before any route runs:

- DNS rebinding (Ollama's CVE-2024-28224): a page whose name is re-pointed to 127.0.0.1
  is, for the browser, the same site as the server, and reads its answers. Its requests
  still name the page's host in `Host`, so only loopback names and the bound address
  are answered (any name on a wildcard bind, which needs a key anyway).
- Cross-site requests: a page elsewhere may send a POST without asking first (a
  "simple" request). Browsers mark every such request with `Origin`; one is answered
  only when the user allowed that origin (`--allow-origin`), and then with the CORS
  headers and preflight its page needs. Programs (the official clients, curl) send no
  Origin and are not affected.

Routes that take a body also want `Content-Type: application/json` (`app`), which no
page can send across sites without a preflight.
"""

from __future__ import annotations

import ipaddress
import json
import re
import urllib.parse
from collections.abc import Iterable
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.serve.protocol import ApiError

ASGIApp = Any  # (scope, receive, send) -> awaitable; Starlette's and uvicorn's own types
METHODS = "GET, POST, OPTIONS"
PREFLIGHT_MAX_AGE_S = 600
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name
WILDCARDS = ("0.0.0.0", "::")


def normalize_origin(text: str) -> str:
    """An `--allow-origin` value as browsers write Origin: `scheme://host[:port]`.

    Raises:
        MmforgeError: Not an http(s) origin (a path, `*`, `null`, another scheme).
    """
    hint = "Give the page's origin as it appears in the address bar, e.g. http://localhost:3000"
    try:
        parts = urllib.parse.urlsplit(text.strip())
        port = parts.port
    except ValueError:
        raise MmforgeError(f"--allow-origin {text!r} is not a web address", hint) from None
    if text.strip() == "*":
        raise MmforgeError(
            "--allow-origin * would let every web page use the model",
            "Name each page's origin, e.g. --allow-origin http://localhost:3000",
        )
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        raise MmforgeError(f"--allow-origin {text!r} is not an http(s) origin", hint)
    host = parts.hostname.lower()
    shown = f"[{host}]" if ":" in host else host
    default = {"http": 80, "https": 443}[parts.scheme]
    return f"{parts.scheme}://{shown}" + (f":{port}" if port not in (None, default) else "")


def allowed_hosts(bound: str) -> frozenset[str] | None:
    """The host names a server bound to `bound` answers (None: any, on a wildcard bind)."""
    if bound in WILDCARDS:
        return None
    return frozenset({"localhost", "127.0.0.1", "::1", _host_name(bound)})


def _host_name(host: str) -> str:
    """A Host header's name: no port, no brackets, lower case, no trailing dot."""
    host = host.strip().lower()
    if host.startswith("["):
        name = host[1 : host.find("]")] if "]" in host else host[1:]
    elif host.count(":") == 1:
        name = host.partition(":")[0]
    else:
        name = host
    return name.rstrip(".")


def _host_allowed(header: str, hosts: frozenset[str]) -> bool:
    name = _host_name(header)
    if name in hosts or name.endswith(".localhost"):  # RFC 6761: always this computer
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class WebGuard:
    """ASGI middleware: refuse other Host names and unknown Origins; CORS for allowed ones.

    Args:
        app: The application it guards.
        hosts: Host names answered (None: any).
        origins: Origins allowed, as `normalize_origin` writes them.
    """

    def __init__(self, app: ASGIApp, hosts: frozenset[str] | None, origins: Iterable[str]):
        self.app = app
        self.hosts = hosts
        self.origins = frozenset(origins)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Answer or refuse one request."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host")
        if self.hosts is not None and host is not None and not _host_allowed(host, self.hosts):
            await _refuse(
                send,
                ApiError(
                    403,
                    f"This server answers requests to this computer only, not to {host!r} "
                    "(a web page that re-pointed its name to this computer)",
                    code="host_not_allowed",
                ),
            )
            return
        origin = headers.get("origin")
        if origin is None:
            await self.app(scope, receive, send)
            return
        if origin.rstrip("/").lower() not in self.origins:
            await _refuse(
                send,
                ApiError(
                    403,
                    f"Requests from web pages are refused ({origin!r}); start the server with "
                    "--allow-origin ORIGIN to let that page use the model",
                    code="origin_not_allowed",
                ),
            )
            return
        cors = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"vary", b"Origin"),
        ]
        method = headers.get("access-control-request-method")
        if scope["method"] == "OPTIONS" and method is not None:
            await _preflight(send, cors, headers.get("access-control-request-headers", ""))
            return

        async def send_with_cors(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *cors]}
            await send(message)

        await self.app(scope, receive, send_with_cors)


async def _preflight(send: Any, cors: list[tuple[bytes, bytes]], asked: str) -> None:
    """The answer to an allowed page's preflight: the methods, and the headers it asked for.

    Any header name is allowed (the official JavaScript client sends its own
    `x-stainless-*` ones): the page is one the user trusts, and the key still applies.
    """
    names = [n.strip().lower() for n in asked.split(",") if _TOKEN.match(n.strip())]
    allowed = ", ".join(dict.fromkeys(["authorization", "content-type", *names]))
    await send(
        {
            "type": "http.response.start",
            "status": 204,
            "headers": [
                *cors,
                (b"access-control-allow-methods", METHODS.encode()),
                (b"access-control-allow-headers", allowed.encode("latin-1")),
                (b"access-control-max-age", str(PREFLIGHT_MAX_AGE_S).encode()),
                (b"content-length", b"0"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})


async def _refuse(send: Any, error: ApiError) -> None:
    body = json.dumps(error.body()).encode()
    await send(
        {
            "type": "http.response.start",
            "status": error.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
