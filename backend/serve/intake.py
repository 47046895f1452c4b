"""A request's pictures and clips as files, for the chat intake (`prepare_attachments`).

The server decodes nothing itself: each part's bytes become a private temporary file
named with the part's format, and the session checks and prepares it exactly as a file
attached in chat (`mmforge.backend.attachments`).

A picture behind an http(s) URL is fetched only when the user allowed it
(`--allow-fetch`), and then only from the public web: the name is resolved once, every
address it resolves to must be public (not this computer, its network, link-local,
reserved or multicast), and the connection goes to the address that was checked, so a
second DNS answer cannot differ. A redirect is checked the same way (http and https
only, at most `MAX_REDIRECTS`). One fetch has `FETCH_TIMEOUT_S` in all, connecting and
reading together (not per read: a host that sends a byte a second held a picture 25 s);
a request's fetches share `FETCH_TOTAL_S` and one size budget, the body limit. Every
failure after the address check is the same error, so the answer does not tell an open
port from a closed one.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import logging
import shutil
import socket
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

from mmforge.backend.serve.protocol import IMAGE_TYPES, ApiError, Part
from mmforge.backend.untrusted import escape

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 10.0  # one picture, connecting and reading
FETCH_TOTAL_S = 30.0  # all the pictures of one request
MAX_REDIRECTS = 3
_REDIRECTS = {301, 302, 303, 307, 308}
_CHUNK = 64 << 10
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class RequestFiles:
    """The files of one request, in a private folder removed by `cleanup`."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="mmforge-serve-"))
        self.files: list[tuple[Path, str]] = []

    def add(self, data: bytes, suffix: str, kind: str) -> None:
        """Write one part."""
        path = self.folder / f"part-{len(self.files) + 1}{suffix}"
        with path.open("xb") as f:
            f.write(data)
        path.chmod(0o600)
        self.files.append((path, kind))

    def cleanup(self) -> None:
        """Remove the folder (idempotent)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def write_parts(parts: list[Part], *, allow_fetch: bool, max_bytes: int) -> RequestFiles:
    """Every part as a file; `ApiError` (400, or 413 for fetched pictures too large).

    Args:
        parts: The request's pictures and clips.
        allow_fetch: Whether pictures given as http(s) URLs may be fetched.
        max_bytes: The most bytes all fetched pictures may hold together.
    """
    files = RequestFiles()
    left = max_bytes
    deadline = time.monotonic() + FETCH_TOTAL_S
    try:
        for part in parts:
            if part.url:
                if not allow_fetch:
                    raise ApiError(
                        400,
                        "This server does not fetch pictures from the web; send the picture "
                        "as a data: URL (or start the server with --allow-fetch)",
                        param="image_url.url",
                        code="fetch_not_allowed",
                    )
                data, suffix = _fetch(part.url, left, max_bytes, deadline)
                left -= len(data)
                files.add(data, suffix, part.kind)
            else:
                files.add(part.data, part.suffix, part.kind)
    except BaseException:
        files.cleanup()
        raise
    return files


def is_public(address: IPAddress) -> bool:
    """Whether an address is on the public internet (what `--allow-fetch` may reach)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:
            return is_public(embedded)
    return address.is_global and not (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_reserved
        or address.is_multicast
        or address.is_unspecified
    )


def _fetch(url: str, left: int, budget: int, request_deadline: float) -> tuple[bytes, str]:
    """The picture at an http(s) URL: at most `left` bytes, within `FETCH_TIMEOUT_S`."""
    deadline = min(time.monotonic() + FETCH_TIMEOUT_S, request_deadline)
    for _ in range(MAX_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(url)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise _failed(url, "bad port") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _refused("over http and https only")
        address = _public_address(url, parts.hostname, port)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        status, location, mime, data = _get(
            url, parts.scheme, parts.hostname, port, address, target, deadline, left, budget
        )
        if status in _REDIRECTS and location:
            url = urllib.parse.urljoin(url, location)
            continue
        if status != 200:
            raise _failed(url, f"HTTP {status}")
        return data, IMAGE_TYPES.get(mime, ".img")
    raise _failed(url, "too many redirects")


def _public_address(url: str, host: str, port: int) -> str:
    """The one address to connect to; `ApiError` when any address of the name is not public."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = [str(info[4][0]) for info in infos]
        parsed = [ipaddress.ip_address(a) for a in addresses]
    except (OSError, ValueError, UnicodeError) as e:
        raise _failed(url, f"cannot resolve: {e}") from None
    if not addresses:
        raise _failed(url, "no address")
    if not all(is_public(a) for a in parsed):
        log.info("fetch refused: %s resolves to %s", escape(url[:200]), addresses)
        raise _refused("from public web addresses only, not from this computer or its network")
    return addresses[0]


def _get(
    url: str,
    scheme: str,
    host: str,
    port: int,
    address: str,
    target: str,
    deadline: float,
    left: int,
    budget: int,
) -> tuple[int, str, str, bytes]:
    """One GET to `address` (for `host`): its status, Location, content type and body."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _failed(url, "out of time")
    kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    conn = kind(host, port, timeout=remaining)

    opened: list[socket.socket] = []

    def pinned(_: object, timeout: float, source: object = None) -> socket.socket:
        # The checked address, never a second lookup of the name (TLS still checks `host`).
        opened.append(socket.create_connection((address, port), timeout))
        return opened[-1]

    conn._create_connection = pinned  # type: ignore[attr-defined]  # http.client's own hook
    expired = threading.Event()

    def expire() -> None:  # the whole fetch's deadline, whatever each read waits
        expired.set()
        for sock in opened:  # the response may hold it after the connection let it go
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    watchdog = threading.Timer(remaining, expire)
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.request("GET", target, headers={"User-Agent": "mmforge-serve", "Accept": "image/*"})
        response = conn.getresponse()
        if response.status != 200:
            return response.status, response.getheader("location") or "", "", b""
        declared = response.getheader("content-length") or ""
        if declared.isdigit() and int(declared) > left:
            raise _too_large(budget)
        chunks: list[bytes] = []
        size = 0
        while chunk := response.read1(_CHUNK):
            size += len(chunk)
            if size > left:
                raise _too_large(budget)
            chunks.append(chunk)
        if expired.is_set():
            raise TimeoutError("out of time")
        return 200, "", response.headers.get_content_type(), b"".join(chunks)
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise _failed(url, "out of time" if expired.is_set() else str(e)) from None
    finally:
        watchdog.cancel()
        conn.close()


def _failed(url: str, why: str) -> ApiError:
    """One error for every way a fetch fails: it does not tell an open port from a closed one."""
    log.info("fetch failed: %s: %s", escape(url[:200]), escape(why))
    return ApiError(
        400,
        f"The picture at the URL could not be fetched (within {FETCH_TIMEOUT_S:g} s); check "
        "the address, or send the picture as a data: URL",
        param="image_url.url",
        code="fetch_failed",
    )


def _refused(why: str) -> ApiError:
    return ApiError(
        400,
        f"This server fetches pictures {why}; send the picture as a data: URL",
        param="image_url.url",
        code="fetch_not_allowed",
    )


def _too_large(budget: int) -> ApiError:
    return ApiError(
        413,
        f"The pictures this request asks to fetch are over the server's limit of {budget} "
        "bytes in all",
        param="image_url.url",
        code="request_too_large",
    )
