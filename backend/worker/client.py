"""The client side of a worker: start `mmforge worker`, send commands, read events."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from typing import Any

from mmforge.backend.jobs import Progress
from mmforge.backend.worker.child import worker_command
from mmforge.backend.worker.protocol import FINAL_EVENTS, parse_event


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
        self._greeted = False
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

    def _read_line(self) -> str | None:
        assert self.process.stdout is not None
        try:
            for line in self.process.stdout:
                if line.strip():
                    return line.strip()
        except (OSError, ValueError):
            return None
        return None

    def read_event(self) -> dict[str, Any] | None:
        """The next event, checked (`protocol.parse_event`), or None when the worker is gone.

        The worker's hello is checked and consumed here; a worker that does not begin
        with one, or speaks another protocol version, gives an error event.
        """
        line = self._read_line()
        if line is None:
            return None
        event = parse_event(line)
        if not self._greeted:
            self._greeted = True
            if event.get("event") == "hello":
                return self.read_event()
            if event.get("event") != "error":
                return {
                    "event": "error",
                    "message": "The worker did not say which protocol it speaks",
                    "hint": "The app and its worker come from different mmforge versions: "
                    "reinstall",
                    "details": line[:2000],
                }
        return event

    def events(self) -> Any:
        """Yield each event until the job ends; then the process is reaped."""
        while (event := self.read_event()) is not None:
            if event.get("event") == "progress":
                yield Progress(**{k: v for k, v in event.items() if k != "event"})
                continue
            yield event
            if event.get("event") in FINAL_EVENTS:
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
