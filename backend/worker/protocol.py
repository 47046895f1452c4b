"""The JSON-lines protocol between a worker and its client.

Commands, one JSON object a line:
    {"cmd": "run", "job": "convert", "args": {...}}
    {"cmd": "cancel"}
A `chat` job stays up for many requests; its commands and events are in `chat.worker`.
Events, one JSON object a line:
    {"event": "progress", "stage", "done", "total", "unit", "message"}
    {"event": "result", "job", "value": {...}}
    {"event": "error", "message", "hint", "details"}
    {"event": "cancelled"}
"""

from __future__ import annotations

import json
import threading
import traceback
from typing import IO, Any

from mmforge.backend.errors import MmforgeError

# Events that end a job.
FINAL_EVENTS = ("result", "error", "cancelled")


class Channel:
    """Writes protocol events to a stream, one line each, from any thread."""

    def __init__(self, stream: IO[str]):
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, event: dict[str, Any]) -> None:
        """Write one event."""
        line = json.dumps(event, default=str)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()


def error_event(e: Exception, **extra: Any) -> dict[str, Any]:
    """The protocol's error event: the user's message, or an internal error with its trace."""
    if isinstance(e, MmforgeError):
        body = {"message": e.user_message, "hint": e.hint, "details": e.details}
    else:
        body = {
            "message": f"Internal error: {type(e).__name__}: {e}",
            "hint": "Please report it with the details",
            "details": traceback.format_exc(),
        }
    return {"event": "error", **extra, **body}


def read_command(stdin: IO[str]) -> dict[str, Any] | None:
    """The next JSON object on stdin; None at end of input or for a line that is not one."""
    line = stdin.readline()
    if not line:
        return None
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
