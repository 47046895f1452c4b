"""The JSON-lines protocol between a worker and its client.

The worker's first event is `{"event": "hello", "protocol": N}`; a client refuses another
version. Every event line is checked in one place (`parse_event`): a line that is not
JSON, an unknown event, a missing or unexpected key becomes an error event that holds
the offending line, so a client never crashes on it or loses the job's end silently.

Commands, one JSON object a line:
    {"cmd": "run", "job": "convert", "args": {...}}
    {"cmd": "cancel"}
A `chat` job stays up for many requests; its commands and events are in `chat.worker`.
Events, one JSON object a line:
    {"event": "progress", "stage", "done", "total", "unit", "message"}
    {"event": "result", "job", "value": {...}}
    {"event": "error", "message", "hint", "details"[, "kind"]}
    {"event": "cancelled"}
"""

from __future__ import annotations

import json
import threading
import traceback
from typing import IO, Any

from mmforge.backend.errors import MmforgeError

PROTOCOL_VERSION = 1

# Events that end a job.
FINAL_EVENTS = ("result", "error", "cancelled")

# Each event: the keys it must carry, and the keys it may carry besides.
_EVENTS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "hello": (frozenset({"protocol"}), frozenset()),
    "progress": (frozenset({"stage", "done"}), frozenset({"total", "unit", "message"})),
    "result": (frozenset({"job", "value"}), frozenset()),
    "error": (frozenset({"message"}), frozenset({"hint", "details", "seq", "kind"})),
    "cancelled": (frozenset(), frozenset()),
    # chat (see chat.worker)
    "ready": (frozenset({"value"}), frozenset()),
    "attachments": (frozenset({"seq", "value"}), frozenset()),
    "token": (frozenset({"seq", "text", "id"}), frozenset()),
    "note": (frozenset({"seq", "text"}), frozenset()),
    "turn": (frozenset({"seq", "value"}), frozenset({"conversation"})),
    "conversation": (frozenset({"value"}), frozenset()),
    "closed": (frozenset(), frozenset()),
}


def hello() -> dict[str, Any]:
    """The first event a worker sends."""
    return {"event": "hello", "protocol": PROTOCOL_VERSION}


def parse_event(line: str) -> dict[str, Any]:
    """One event line, checked; anything malformed becomes an error event holding it."""
    try:
        event = json.loads(line)
    except ValueError:
        return _malformed(line, "not JSON")
    if not isinstance(event, dict) or event.get("event") not in _EVENTS:
        return _malformed(line, "not a known event")
    required, optional = _EVENTS[event["event"]]
    keys = set(event) - {"event"}
    if not required <= keys:
        return _malformed(line, f"missing {sorted(required - keys)}")
    if keys - required - optional:
        return _malformed(line, f"unexpected {sorted(keys - required - optional)}")
    kind = event["event"]
    if kind == "progress" and not _progress_ok(event):
        return _malformed(line, "progress values of the wrong type")
    if kind in ("result", "ready", "conversation", "turn") and not isinstance(event["value"], dict):
        return _malformed(line, "value is not an object")
    if kind == "hello" and event["protocol"] != PROTOCOL_VERSION:
        return {
            "event": "error",
            "message": f"The worker speaks protocol {event['protocol']!r}, this app "
            f"{PROTOCOL_VERSION}",
            "hint": "The app and its worker come from different mmforge versions: reinstall",
            "details": line[:2000],
        }
    return event


def _progress_ok(event: dict[str, Any]) -> bool:
    number = (int, float)
    return (
        isinstance(event["stage"], str)
        and isinstance(event["done"], number)
        and (event.get("total") is None or isinstance(event["total"], number))
        and isinstance(event.get("unit", ""), str)
        and isinstance(event.get("message", ""), str)
    )


def _malformed(line: str, why: str) -> dict[str, Any]:
    return {
        "event": "error",
        "message": "The worker sent a malformed event",
        "hint": "This is a bug in mmforge: please report it with the details",
        "details": f"{why}: {line[:2000]}",
    }


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
        if e.kind:
            body["kind"] = e.kind
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
