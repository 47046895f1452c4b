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
