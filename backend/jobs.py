"""Progress events and cancellation shared by every long operation.

A job is a plain function that takes a `JobContext`. It reports `Progress` events through
the context and calls `check_cancel()` between units of work; it returns a typed result.
The CLI, the worker process and the GUI all drive jobs the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mmforge.backend.errors import Cancelled


@dataclass(frozen=True)
class Progress:
    """One progress report of a stage.

    Attributes:
        stage: Stable stage name, e.g. "download" or "inspect".
        done: Units done so far.
        total: Units in all, or None when unknown.
        unit: What a unit is: "bytes", "files" or "steps".
        message: A short human text, e.g. the file being fetched.
    """

    stage: str
    done: float
    total: float | None = None
    unit: str = "steps"
    message: str = ""


ProgressCallback = Callable[[Progress], None]


class CancelToken:
    """A flag that another thread (or a signal handler) sets to stop a job."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Ask the job to stop at its next check."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether cancel was asked for."""
        return self._event.is_set()


def _ignore(_: Progress) -> None:
    return None


@dataclass
class JobContext:
    """What a job gets from whoever runs it: a progress sink and a cancel token.

    Attributes:
        on_progress: Receives every `Progress` event.
        cancel: Checked by the job between units of work.
        min_interval_s: Byte-level progress is throttled to at most one event per interval
            per stage, except the first and the last.
    """

    on_progress: ProgressCallback = _ignore
    cancel: CancelToken = field(default_factory=CancelToken)
    min_interval_s: float = 0.1
    _last_emit: dict[str, float] = field(default_factory=dict)

    def check_cancel(self) -> None:
        """Raise `Cancelled` if the job was asked to stop."""
        if self.cancel.cancelled:
            raise Cancelled()

    def report(
        self,
        stage: str,
        done: float,
        total: float | None = None,
        *,
        unit: str = "steps",
        message: str = "",
        force: bool = False,
    ) -> None:
        """Send a progress event (throttled unless forced or final) and check cancel."""
        self.check_cancel()
        now = time.monotonic()
        final = total is not None and done >= total
        last = self._last_emit.get(stage)
        if force or final or last is None or now - last >= self.min_interval_s:
            self._last_emit[stage] = now
            self.on_progress(Progress(stage, done, total, unit, message))
