"""Backend clients as Qt signals: every job and the chat run in worker processes.

The GUI never computes. `JobRunner` drives one `WorkerJob` (inspect, convert, verify…)
and `ChatBridge` one `ChatClient`. Each reads its worker's events on a plain daemon thread
(a blocking pipe read, which releases the GIL) and emits signals; Qt queues them to the
receivers, which live in the GUI thread. Receivers must be slots of GUI objects, not
lambdas: a lambda would run in the reading thread (see FINDINGS).
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from mmforge.backend.errors import MmforgeError
from mmforge.backend.jobs import Progress


def _error(message: str, hint: str | None = None, details: str | None = None) -> dict[str, Any]:
    return {"message": message, "hint": hint, "details": details}


class JobRunner(QObject):
    """One job at a time in a worker process.

    Signals:
        progress(Progress), succeeded(dict value), failed(dict error), cancelled(),
        finished() after any of the three.
    """

    progress = Signal(object)
    succeeded = Signal(dict)
    failed = Signal(dict)
    cancelled = Signal()
    finished = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._job: Any = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether a job is under way."""
        return self._job is not None

    def start(self, job: str, args: dict[str, Any]) -> None:
        """Start `job` with `args` (see `backend/worker.py`)."""
        from mmforge.backend.worker import WorkerJob

        if self._job is not None:
            raise RuntimeError("a job is already running")
        self._job = WorkerJob(job, args)
        self._thread = threading.Thread(target=self._pump, args=(self._job,), daemon=True)
        self._thread.start()

    def shutdown(self, grace_s: float = 10.0) -> None:
        """Stop any job and wait for it (the window is closing): cancel, then terminate."""
        thread = self._thread
        if thread is None:
            return
        self.cancel()
        thread.join(timeout=grace_s)
        if thread.is_alive():
            self.kill()
            thread.join(timeout=grace_s)

    def cancel(self) -> None:
        """Ask the job to stop at its next check (it cleans up after itself)."""
        if self._job is not None:
            self._job.cancel()

    def kill(self) -> None:
        """Hard stop: terminate the worker."""
        if self._job is not None:
            self._job.kill()

    def _pump(self, job: Any) -> None:
        outcome: tuple[str, Any] = ("failed", _error("The worker stopped unexpectedly"))
        try:
            for event in job.events():
                if isinstance(event, Progress):
                    self.progress.emit(event)
                    continue
                kind = event.get("event")
                if kind == "result":
                    outcome = ("succeeded", event.get("value") or {})
                elif kind == "cancelled":
                    outcome = ("cancelled", None)
                elif kind == "error":
                    outcome = (
                        "failed",
                        _error(str(event.get("message")), event.get("hint"), event.get("details")),
                    )
        except (OSError, ValueError) as e:
            outcome = (
                "failed",
                _error(f"Lost contact with the worker: {e}", None, job.stderr_tail),
            )
        finally:
            job.close()
        self._job = None
        if outcome[0] == "succeeded":
            self.succeeded.emit(outcome[1])
        elif outcome[0] == "cancelled":
            self.cancelled.emit()
        else:
            self.failed.emit(outcome[1])
        self.finished.emit()


class ChatBridge(QObject):
    """A chat session in a worker process, driven by `ChatClient`.

    Requests are queued and run one after another on the bridge's thread; `stop()` acts
    at once, between two tokens.

    Signals:
        ready(dict info), token(str text), attachments(list), turn(dict), failed(dict),
        conversation(dict), busy(bool), closed().
    """

    ready = Signal(dict)
    token = Signal(str)
    attachments = Signal(list)
    turn = Signal(dict)
    failed = Signal(dict)
    conversation = Signal(dict)
    busy = Signal(bool)
    closed = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._client: Any = None
        self._requests: queue.Queue[tuple[str, tuple[Any, ...]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def load(
        self,
        package: Path,
        ep: str = "cpu",
        store_root: Path | None = None,
        conversation: str | None = None,
    ) -> None:
        """Start the worker and load the package (ready or failed follows)."""
        self.close()
        self._requests = queue.Queue()
        self._thread = threading.Thread(
            target=self._run, args=(package, ep, store_root, conversation), daemon=True
        )
        self._thread.start()

    def send(self, text: str, files: list[tuple[Path, str]], options: dict[str, Any]) -> None:
        """Queue a user message with attachments (path, "image"|"audio")."""
        self._requests.put(("send", (text, files, options)))

    def regenerate(self, options: dict[str, Any]) -> None:
        """Queue Regenerate."""
        self._requests.put(("regenerate", (options,)))

    def edit_last(self, text: str, options: dict[str, Any]) -> None:
        """Queue edit-last-message (attachments kept)."""
        self._requests.put(("edit_last", (text, None, options)))

    def new_conversation(self) -> None:
        """Queue a new, empty conversation."""
        self._requests.put(("new_conversation", ()))

    def open_conversation(self, conversation_id: str) -> None:
        """Queue opening a saved conversation."""
        self._requests.put(("open_conversation", (conversation_id,)))

    def stop(self) -> None:
        """Stop the answer being streamed."""
        client = self._client
        if client is not None:
            client.stop()

    def close(self) -> None:
        """End the session (the worker exits)."""
        if self._thread is not None:
            self.stop()
            self._requests.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    def _run(
        self, package: Path, ep: str, store_root: Path | None, conversation: str | None
    ) -> None:
        from mmforge.backend.chat_worker import ChatClient

        try:
            client = ChatClient(package, ep, store_root=store_root, conversation=conversation)
        except MmforgeError as e:
            self.failed.emit(_error(e.user_message, e.hint, e.details))
            self.closed.emit()
            return
        self._client = client
        self.ready.emit(client.info)
        try:
            while (request := self._requests.get()) is not None:
                name, args = request
                self.busy.emit(True)
                try:
                    result = getattr(client, name)(*args)
                    if isinstance(result, dict):
                        self.conversation.emit(result)
                    else:
                        self._stream(result)
                except MmforgeError as e:
                    self.failed.emit(_error(e.user_message, e.hint, e.details))
                finally:
                    self.busy.emit(False)
        finally:
            self._client = None
            client.close()
            self.closed.emit()

    def _stream(self, events: Any) -> None:
        for event in events:
            kind = event.get("event")
            if kind == "token":
                self.token.emit(str(event.get("text", "")))
            elif kind == "attachments":
                self.attachments.emit(list(event.get("value") or []))
            elif kind == "turn":
                self.turn.emit(dict(event.get("value") or {}))
            elif kind == "error":
                self.failed.emit(
                    _error(str(event.get("message")), event.get("hint"), event.get("details"))
                )
