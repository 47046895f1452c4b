"""Running jobs in a worker process that speaks JSON lines on stdin/stdout.

The GUI (and any client that must stay responsive) starts `mmforge worker`, writes one
`run` command, and reads events until `result`, `error` or `cancelled`. A `cancel`
command stops the job at its next check; terminating the process is the hard cancel.
Heavy libraries (torch, transformers, onnxruntime-genai) are imported in the worker only.

Commands, one JSON object a line:
    {"cmd": "run", "job": "convert", "args": {...}}
    {"cmd": "cancel"}
A `chat` job stays up for many requests; its commands and events are in `chat_worker`.
Events, one JSON object a line:
    {"event": "progress", "stage", "done", "total", "unit", "message"}
    {"event": "result", "job", "value": {...}}
    {"event": "error", "message", "hint", "details"}
    {"event": "cancelled"}
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from mmforge.backend.errors import Cancelled, MmforgeError
from mmforge.backend.jobs import JobContext, Progress

log = logging.getLogger(__name__)


def _inspect(args: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mmforge.backend.inspect import inspect_source

    profile = inspect_source(
        str(args["source"]), ctx, trust_remote_code=bool(args.get("trust_remote_code", False))
    )
    return profile.to_dict()


def _convert(args: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mmforge.backend.convert import convert

    manifest = convert(
        str(args["source"]),
        Path(args["output"]),
        ctx,
        dtype=str(args.get("dtype", "f32")),
        ep=str(args.get("ep", "cpu")),
        trust_remote_code=bool(args.get("trust_remote_code", False)),
        allow_pickle=bool(args.get("allow_pickle", False)),
    )
    return manifest.to_dict()


def _verify(args: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mmforge.backend.verify import verify

    report = verify(
        Path(args["package"]),
        str(args["reference"]),
        ctx,
        images=[Path(p) for p in args.get("images", [])],
        audios=[Path(p) for p in args.get("audios", [])],
        tokens=int(args.get("tokens", 32)),
    )
    return report.to_dict()


def _demo(args: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mmforge.backend.tiny.demo import demo_checkpoint

    ctx.report("demo", 0, 1, message="building the demo checkpoint", force=True)
    folder = demo_checkpoint()
    ctx.report("demo", 1, 1, message=str(folder))
    return {"folder": str(folder)}


def _eps(args: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mmforge.backend.chat import available_eps

    return dict(available_eps())


JOBS: dict[str, Callable[[dict[str, Any], JobContext], dict[str, Any]]] = {
    "inspect": _inspect,
    "convert": _convert,
    "verify": _verify,
    "demo": _demo,
    "eps": _eps,
}


class _Channel:
    """Writes protocol events to the real stdout, one line each, from any thread."""

    def __init__(self, stream: IO[str]):
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, default=str)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()


def serve(stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> int:
    """Run one job as the commands on stdin say; report on stdout. Returns an exit code.

    Anything else that writes to stdout (a library's print) is redirected to stderr, so
    the event stream stays parseable.
    """
    stdin = stdin or sys.stdin
    channel = _Channel(stdout or sys.stdout)
    sys.stdout = sys.stderr
    first = read_command(stdin)
    if first is not None and first.get("cmd") == "run" and first.get("job") == "chat":
        from mmforge.backend.chat_worker import serve_chat

        return serve_chat(dict(first.get("args") or {}), stdin, channel.send)
    if first is None or first.get("cmd") != "run" or first.get("job") not in JOBS:
        channel.send({"event": "error", "message": f"Expected a run command, got {first}"})
        return 2
    ctx = JobContext(on_progress=lambda p: channel.send({"event": "progress", **asdict(p)}))
    # Terminating the worker is the hard cancel: stop at the next check and clean up.
    signal.signal(signal.SIGTERM, lambda *_: ctx.cancel.cancel())
    listener = threading.Thread(target=_listen, args=(stdin, ctx), daemon=True)
    listener.start()
    job = str(first["job"])
    try:
        value = JOBS[job](dict(first.get("args") or {}), ctx)
    except Cancelled:
        channel.send({"event": "cancelled"})
        return 130
    except MmforgeError as e:
        channel.send(error_event(e))
        return 2
    except Exception as e:  # noqa: BLE001 - reported as an event; the client shows it
        channel.send(error_event(e))
        return 1
    channel.send({"event": "result", "job": job, "value": value})
    return 0


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


def _listen(stdin: IO[str], ctx: JobContext) -> None:
    """Set the cancel flag on a cancel command, or when the client goes away."""
    while True:
        command = read_command(stdin)
        if command is None or command.get("cmd") == "cancel":
            ctx.cancel.cancel()
            return


def app_command(*args: str) -> list[str]:
    """How to run an mmforge subcommand in a child process.

    The frozen app's own executable, else this interpreter.
    """
    if getattr(sys, "frozen", False):
        return [sys.executable, *args]
    return [sys.executable, "-m", "mmforge.app", *args]


def worker_command() -> list[str]:
    """How to start a worker."""
    return app_command("worker")


class WorkerJob:
    """Client side: one job in a worker process, events read as they come.

    Args:
        job: A name from JOBS.
        args: The job's arguments (JSON-serialisable).
        env: Extra environment for the worker.
    """

    def __init__(self, job: str, args: dict[str, Any], env: dict[str, str] | None = None):
        import subprocess

        self.process = subprocess.Popen(
            worker_command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self._stdin_lock = threading.RLock()  # reentrant: a signal handler may write too
        self._stderr_tail: list[str] = []
        # Drain stderr (library warnings) so a chatty worker never blocks on a full pipe.
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        self.command({"cmd": "run", "job": job, "args": args})

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        with contextlib.suppress(OSError, ValueError):
            for line in self.process.stderr:
                self._stderr_tail.append(line)
                del self._stderr_tail[:-200]

    @property
    def stderr_tail(self) -> str:
        """The worker's last lines on stderr (for error details)."""
        return "".join(self._stderr_tail)

    def command(self, command: dict[str, Any]) -> bool:
        """Write one command; False when the worker is gone."""
        if self.process.poll() is not None or self.process.stdin is None:
            return False
        try:
            with self._stdin_lock:
                self.process.stdin.write(json.dumps(command) + "\n")
                self.process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return False
        return True

    def read_event(self) -> dict[str, Any] | None:
        """The next event as sent (progress included), or None when the worker is gone."""
        assert self.process.stdout is not None
        try:
            for line in self.process.stdout:
                line = line.strip()
                if line:
                    value = json.loads(line)
                    return value if isinstance(value, dict) else None
        except (OSError, ValueError):
            return None
        return None

    def events(self) -> Any:
        """Yield each event until the job ends; then the process is reaped."""
        assert self.process.stdout is not None
        while (event := self.read_event()) is not None:
            if event.get("event") == "progress":
                yield Progress(**{k: v for k, v in event.items() if k != "event"})
                continue
            yield event
            if event.get("event") in ("result", "error", "cancelled"):
                break
        self.close()

    def cancel(self) -> None:
        """Ask the job to stop at its next check."""
        self.command({"cmd": "cancel"})

    def kill(self) -> None:
        """Hard cancel: terminate the worker (nothing it was writing is published)."""
        if self.process.poll() is None:
            self.process.terminate()
        self.close()

    def close(self, timeout: float = 30) -> None:
        """Wait for the process and release its pipes."""
        import subprocess

        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
