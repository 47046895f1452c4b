"""Hub calls that cannot hang: each has a deadline, and Cancel reaches it while it waits.

A hub (or a mirror, or a proxy) that accepts the connection and never answers would
otherwise block `inspect` forever: huggingface_hub passes no timeout on some metadata
calls. The call runs in a daemon thread; the job waits for it in short steps, checking
its cancel flag, and gives up at the deadline with a message that says the hub did not
answer.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from mmforge.backend.errors import MmforgeError
from mmforge.backend.jobs import JobContext

T = TypeVar("T")


def hub_timeout_s() -> float:
    """Seconds a hub metadata call may take (MMFORGE_HUB_TIMEOUT, default 30)."""
    try:
        return max(0.1, float(os.environ.get("MMFORGE_HUB_TIMEOUT", "30")))
    except ValueError:
        return 30.0


class HubTimeout(MmforgeError):
    """The hub did not answer in time."""


def hub_call(what: str, call: Callable[[], T], ctx: JobContext | None = None) -> T:
    """Run one blocking hub call with the deadline, cancellable while it waits.

    Raises:
        HubTimeout: No answer within `hub_timeout_s()`.
        Cancelled: The job was cancelled while it waited.
    """
    ctx = ctx or JobContext()
    timeout = hub_timeout_s()
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting job as is
            outcome["error"] = e
        finally:
            done.set()

    threading.Thread(target=run, name=f"hub call: {what}", daemon=True).start()
    deadline = time.monotonic() + timeout
    while not done.wait(0.05):
        ctx.check_cancel()
        if time.monotonic() > deadline:
            raise HubTimeout(
                f"The hub did not answer within {timeout:.0f} s ({what})",
                "Check the network connection (or HF_ENDPOINT / a proxy) and try again",
            )
    if "error" in outcome:
        raise outcome["error"]
    value: T = outcome["value"]
    return value


# The most bytes of one JSON answer from the hub (a repository's file list): a repository
# of 10,000 files answers about 2 MB. A 300 MB answer held 956 MB of memory.
ANSWER_LIMIT = 32 << 20
_NOT_THE_HUB = (
    "Check the network (a captive portal or a proxy's sign-in page answers in the hub's "
    "place until you sign in, in a browser) and HF_ENDPOINT, then try again"
)


def get_json(url: str, what: str, *, headers: dict[str, str], params: dict[str, Any]) -> Any:
    """GET one JSON answer from the hub, bounded in size and refused unless it is JSON.

    The body is streamed and counted (after any Content-Encoding is undone), so a hostile
    or broken endpoint cannot make mmforge hold more than `ANSWER_LIMIT` bytes. An error
    status becomes huggingface_hub's own exception (repository not found, gated...),
    raised from the bounded body.

    Args:
        url: The hub URL.
        what: What the answer is, for messages ("repository information").
        headers: Request headers (the token, the user agent).
        params: Query parameters.

    Raises:
        MmforgeError: Too large, a web page (a captive portal) or not JSON.
        huggingface_hub.errors.HfHubHTTPError: The hub answered with an error status.
    """
    import httpx2
    from huggingface_hub.utils import get_session, hf_raise_for_status

    from mmforge.backend.untrusted import parse_json

    with get_session().stream(
        "GET", url, params=params, headers=headers, timeout=hub_timeout_s() + 5
    ) as response:
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > ANSWER_LIMIT:
                raise MmforgeError(
                    f"The hub's answer ({what}) is larger than the {ANSWER_LIMIT:,} bytes "
                    "mmforge reads of it",
                    "Check HF_ENDPOINT (a mirror or proxy may be misbehaving) and try again",
                )
    if response.status_code >= 400:
        kept = [
            (k, v)
            for k, v in response.headers.multi_items()
            if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
        ]
        settled = httpx2.Response(
            response.status_code, headers=kept, content=bytes(body), request=response.request
        )
        hf_raise_for_status(settled)
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if response.status_code != 200 or kind == "text/html" or body.lstrip()[:1] == b"<":
        raise MmforgeError(
            f"{hub_name(url)} answered with a web page or a redirect (HTTP "
            f"{response.status_code}), not the hub's {what}",
            _NOT_THE_HUB,
            details=bytes(body[:500]).decode("utf-8", "replace"),
        )
    try:
        return parse_json(bytes(body), f"the hub's {what}", limit=ANSWER_LIMIT)
    except MmforgeError as e:
        raise MmforgeError(e.user_message, _NOT_THE_HUB) from None


def hub_name(url: str) -> str:
    """The address of a hub URL, scheme and host only, for messages."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if not parts.hostname:
        return "The hub"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"
