"""The client side of a worker: start `mmforge worker`, send commands, read events."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from mmforge.backend.jobs import Progress
from mmforge.backend.worker.child import worker_command
from mmforge.backend.worker.protocol import FINAL_EVENTS, parse_event

# How long a worker has to end after SIGTERM before it is killed. A worker that renders a
# chat template forever, or is stuck in native code, ignores SIGTERM.
KILL_GRACE_S = 2.0


class WorkerJob:
    """Client side: one job in a worker process, events read as they come.

    One thread reads the events (`events` or `read_event`); `cancel` and `kill` may be
    called from any other thread. Only the reading thread closes the event pipe (`close`):
    closing a pipe that another thread is reading blocks until that read ends, which, for
    a worker that never writes again, is never. `kill` ends the worker's whole process
    group instead, so the reader sees the end of the pipe.

    Args:
        job: A name from JOBS.
        args: The job's arguments (JSON-serialisable).
        env: Extra environment for the worker.
    """

    def __init__(self, job: str, args: dict[str, Any], env: dict[str, str] | None = None):
        import subprocess

        self.tmpdir = private_tmpdir()
        try:
            self.process = subprocess.Popen(
                worker_command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                # Not the code page (cp1252 on Windows): the worker writes UTF-8 (app/stdio.py).
                encoding="utf-8",
                errors="replace",
                env={**os.environ, **(env or {}), **tmpdir_env(self.tmpdir)},
                # Its own process group: `kill` reaches what the worker started too (a child
                # that inherited the pipe would otherwise keep it open after the worker died).
                start_new_session=sys.platform != "win32",
            )
        except BaseException:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            raise
        self.cancel_requested = False
        self.killed = False
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
            self.process.stderr.close()  # this thread's pipe: closed by it, at its end

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
        self.cancel_requested = True
        self.command({"cmd": "cancel"})

    def kill(self, grace_s: float = KILL_GRACE_S) -> None:
        """Hard stop, from any thread: SIGTERM, then SIGKILL after `grace_s`.

        Nothing the worker was writing is published (its outputs are staged). The pipes
        stay open for the reading thread, which now reads their end and closes them.
        """
        import subprocess

        if self.process.poll() is not None:
            return
        self.killed = True
        self._signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self._signal(getattr(signal, "SIGKILL", signal.SIGTERM))
            self.process.wait()
        # What the worker started may outlive it while still holding the pipe.
        self._signal(getattr(signal, "SIGKILL", signal.SIGTERM))
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    def _signal(self, sig: int) -> None:
        """Send `sig` to the worker's process group (to the worker alone on Windows)."""
        with contextlib.suppress(OSError):
            if sys.platform != "win32":
                os.killpg(self.process.pid, sig)
            elif sig == signal.SIGTERM:
                self.process.terminate()
            else:
                self.process.kill()

    def close(self, timeout: float = 30) -> None:
        """Wait for the process (killing it after `timeout`) and release its pipes.

        Call it from the thread that reads the events, or when no thread reads them.
        """
        import subprocess

        if self.process.stdin is not None:
            with contextlib.suppress(OSError, ValueError), self._stdin_lock:
                self.process.stdin.close()  # the worker reads its end and exits
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(grace_s=0)
        if self.process.stdout is not None:
            with contextlib.suppress(OSError):
                self.process.stdout.close()
        # stderr belongs to the drain thread, which ends at its end of file.
        self._drain.join(timeout=KILL_GRACE_S)
        shutil.rmtree(self.tmpdir, ignore_errors=True)


def private_tmpdir() -> Path:
    """A fresh folder only this user can enter (0700), for one worker's temporary files.

    ONNX Runtime GenAI 0.18 writes its telemetry to `$TMPDIR/.ses` (`/tmp/.ses` by
    default) and follows a link there: in a shared /tmp, anyone could plant `.ses` as a
    link and have a chat overwrite the file it names. A worker's TMPDIR is its own.
    """
    return Path(tempfile.mkdtemp(prefix="mmforge-worker-"))


def tmpdir_env(folder: Path) -> dict[str, str]:
    """The environment that gives a child `folder` as its temp folder (POSIX and Windows)."""
    return {name: str(folder) for name in ("TMPDIR", "TEMP", "TMP")}
