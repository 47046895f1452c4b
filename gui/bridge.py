"""Backend clients as Qt signals: every job and the chat run in worker processes.

The GUI never computes. `JobRunner` drives one `WorkerJob` (inspect, convert, verify…)
and `ChatBridge` one `ChatClient`. Each reads its worker's events on a plain daemon thread
(a blocking pipe read, which releases the GIL) and queues them; a payload-free signal,
queued into the GUI thread, makes the bridge emit its public signals there. Whatever
connects to them, plain functions included, then runs in the GUI thread. A function
connected to a signal emitted from another thread would run in that thread (see
FINDINGS); a test helper doing so crashed the suite.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal, Slot

from mmforge.backend.chat.conversations import Conversation
from mmforge.backend.chat.values import SessionInfo, TurnResult
from mmforge.backend.convert import Manifest
from mmforge.backend.errors import MmforgeError
from mmforge.backend.inspect import Profile
from mmforge.backend.jobs import Progress
from mmforge.backend.verify import VerifyReport

# The typed result of each job, rebuilt from the worker's JSON (the others stay dicts).
RESULT_TYPES: dict[str, Any] = {"inspect": Profile, "convert": Manifest, "verify": VerifyReport}
# How long Cancel or Stop waits for a worker to stop by itself (and clean up) before it
# is ended: a worker stuck in a chat template or in native code never reads the request.
# Generous: a busy machine can take seconds to end a turn, and ending a chat worker ends
# its session.
STOP_GRACE_S = 30.0
# How long closing the window waits for each worker before ending it.
CLOSE_GRACE_S = 5.0


def _drain(events: queue.Queue[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Everything queued so far."""
    items = []
    while True:
        try:
            items.append(events.get_nowait())
        except queue.Empty:
            return items


def _error(
    message: str, hint: str | None = None, details: str | None = None, kind: Any = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"message": message, "hint": hint, "details": details}
    if isinstance(kind, str) and kind:
        error["kind"] = kind  # what the view may offer (sign-in, near names)
    return error


class JobRunner(QObject):
    """One job at a time in a worker process.

    Signals:
        progress(Progress), succeeded(value: the job's typed result, see RESULT_TYPES),
        failed(dict error), cancelled(), finished() after any of the three.
    """

    progress = Signal(object)
    succeeded = Signal(object)
    failed = Signal(dict)
    cancelled = Signal()
    finished = Signal()
    _wake = Signal()  # from the reading thread, queued to the GUI thread; no payload

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._job: Any = None
        self._thread: threading.Thread | None = None
        # Payloads travel in a plain queue and only a payload-free signal crosses threads.
        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._wake.connect(self._dispatch, Qt.ConnectionType.QueuedConnection)

    @Slot()
    def _dispatch(self) -> None:
        """Emit the public signals in the GUI thread, whoever connects to them."""
        for kind, payload in _drain(self._events):
            if kind == "progress":
                self.progress.emit(payload)
            elif kind == "succeeded":
                self.succeeded.emit(payload)
            elif kind == "cancelled":
                self.cancelled.emit()
            elif kind == "failed":
                self.failed.emit(payload)
            elif kind == "finished":
                self.finished.emit()

    def _put(self, kind: str, payload: Any) -> None:
        self._events.put((kind, payload))
        self._wake.emit()

    @property
    def running(self) -> bool:
        """Whether a job is under way."""
        return self._job is not None

    def start(self, job: str, args: dict[str, Any]) -> None:
        """Start `job` with `args` (see `backend/worker/server.py`)."""
        from mmforge.backend.worker.client import WorkerJob

        if self._job is not None:
            raise RuntimeError("a job is already running")
        self._job = WorkerJob(job, args)
        self._thread = threading.Thread(
            target=self._pump, args=(self._job, RESULT_TYPES.get(job)), daemon=True
        )
        self._thread.start()

    def shutdown(self, grace_s: float | None = None) -> None:
        """Stop any job and wait for it (the window is closing): cancel, then kill."""
        grace_s = CLOSE_GRACE_S if grace_s is None else grace_s
        thread = self._thread
        if thread is None:
            return
        job = self._job
        if job is not None:
            job.cancel()
        thread.join(timeout=grace_s)
        if thread.is_alive() and job is not None:
            job.kill()
        thread.join(timeout=grace_s)
        self._thread = None

    @Slot()
    def cancel(self) -> None:
        """Ask the job to stop at its next check (it cleans up after itself).

        A worker still running STOP_GRACE_S later is ended (reported as cancelled). No
        argument: a button's `clicked(bool)` connects here, and its False is no grace.
        """
        grace_s = STOP_GRACE_S
        job = self._job
        if job is None:
            return
        job.cancel()
        QTimer.singleShot(int(grace_s * 1000), self, lambda: self._kill_if_running(job))

    def _kill_if_running(self, job: Any) -> None:
        if self._job is job:
            # On its own thread: SIGTERM, then SIGKILL, may take a moment.
            threading.Thread(target=job.kill, daemon=True).start()

    def kill(self) -> None:
        """Hard stop: terminate the worker."""
        if self._job is not None:
            self._job.kill()

    def _pump(self, job: Any, result_type: Any) -> None:
        outcome: tuple[str, Any] = ("failed", _error("The worker stopped unexpectedly"))
        try:
            for event in job.events():
                if isinstance(event, Progress):
                    self._put("progress", event)
                    continue
                kind = event.get("event")
                if kind == "result":
                    value = event.get("value") or {}
                    typed = result_type.from_dict(value) if result_type else value
                    outcome = ("succeeded", typed)
                elif kind == "cancelled":
                    outcome = ("cancelled", None)
                elif kind == "error":
                    outcome = (
                        "failed",
                        _error(
                            str(event.get("message")),
                            event.get("hint"),
                            event.get("details"),
                            event.get("kind"),
                        ),
                    )
        except MmforgeError as e:  # a result that is not what the job returns
            outcome = ("failed", _error(e.user_message, e.hint, e.details))
        except Exception as e:  # noqa: BLE001 - whatever happens, the runner must end
            outcome = (
                "failed",
                _error(f"Lost contact with the worker: {e}", None, job.stderr_tail),
            )
        finally:
            job.close()
        if job.killed and job.cancel_requested:
            outcome = ("cancelled", None)  # ended because it did not stop when asked
        self._job = None
        self._put(outcome[0], outcome[1])
        self._put("finished", None)


class ChatBridge(QObject):
    """A chat session in a worker process, driven by `ChatClient`.

    Requests are queued and run one after another on the bridge's thread; `stop()` acts
    at once, between two tokens.

    The worker owns the conversation and its store; the bridge hands on what it reports,
    typed: the conversation after every change (before the `turn` that changed it).

    Signals:
        ready(SessionInfo), token(str text), attachments(list), turn(TurnResult),
        failed(dict), conversation(Conversation), busy(bool), closed(), and note(str
        text): what the session does before an answer (summarising a full conversation).
    """

    ready = Signal(object)
    token = Signal(str)
    note = Signal(str)
    attachments = Signal(list)
    turn = Signal(object)
    failed = Signal(dict)
    conversation = Signal(object)
    busy = Signal(bool)
    closed = Signal()
    _wake = Signal()  # from the session thread, queued to the GUI thread; no payload

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        # Payloads travel in a plain queue and only a payload-free signal crosses threads.
        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._wake.connect(self._dispatch, Qt.ConnectionType.QueuedConnection)
        self._client: Any = None
        self._job: Any = None  # the worker, from its start (loading included)
        self._request_no = 0  # counts requests; `_running` is the one under way, or 0
        self._running = 0
        self._stopped_by_kill = False
        # (client method, its arguments, the system prompt to set first or None)
        self._requests: queue.Queue[tuple[str, tuple[Any, ...], str | None] | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    @Slot()
    def _dispatch(self) -> None:
        """Emit the public signals in the GUI thread, whoever connects to them."""
        for kind, payload in _drain(self._events):
            signal = getattr(self, kind)
            if kind == "closed":
                signal.emit()
            else:
                signal.emit(payload)

    def _put(self, kind: str, payload: Any) -> None:
        self._events.put((kind, payload))
        self._wake.emit()

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

    def send(
        self,
        text: str,
        files: list[tuple[Path, str]],
        options: dict[str, Any],
        system: str | None = None,
    ) -> None:
        """Queue a user message with attachments (path, "image"|"audio").

        `system`, when given, becomes the conversation's system prompt first.
        """
        self._requests.put(("send", (text, files, options), system))

    def regenerate(self, options: dict[str, Any], system: str | None = None) -> None:
        """Queue Regenerate."""
        self._requests.put(("regenerate", (options,), system))

    def edit_last(
        self,
        text: str,
        options: dict[str, Any],
        system: str | None = None,
        files: list[tuple[Path, str]] | None = None,
    ) -> None:
        """Queue edit-last-message with these attachments (None: the old message's)."""
        self._requests.put(("edit_last", (text, files, options), system))

    def new_conversation(self) -> None:
        """Queue a new, empty conversation."""
        self._requests.put(("new_conversation", (), None))

    def open_conversation(self, conversation_id: str) -> None:
        """Queue opening a saved conversation."""
        self._requests.put(("open_conversation", (conversation_id,), None))

    def delete_conversation(self, conversation_id: str) -> None:
        """Queue deleting a saved conversation (the worker writes the store)."""
        self._requests.put(("delete_conversation", (conversation_id,), None))

    def rename_conversation(self, conversation_id: str, title: str) -> None:
        """Queue retitling a conversation (open or saved)."""
        self._requests.put(("rename_conversation", (conversation_id, title), None))

    @Slot()
    def stop(self) -> None:
        """Stop the answer being streamed.

        A request still running STOP_GRACE_S later (a worker stuck before its first
        token) ends the worker: the session closes, saying why. No argument: a button's
        `clicked(bool)` connects here.
        """
        grace_s = STOP_GRACE_S
        client = self._client
        if client is not None:
            client.stop()
        running = self._running
        if running:
            QTimer.singleShot(int(grace_s * 1000), self, lambda: self._kill_if_running(running))

    def _kill_if_running(self, request: int) -> None:
        job = self._job
        if job is not None and self._running == request:
            self._stopped_by_kill = True
            threading.Thread(target=job.kill, daemon=True).start()

    def unload(self) -> None:
        """End the session without waiting (the app's Unload).

        The worker exits after the request it runs, and `closed` follows.
        """
        if self._thread is not None:
            self._requests.put(None)

    def close(self, grace_s: float | None = None) -> None:
        """End the session (the worker exits; one that does not within `grace_s` is ended)."""
        grace_s = CLOSE_GRACE_S if grace_s is None else grace_s
        thread = self._thread
        if thread is None:
            return
        client = self._client
        if client is not None:
            client.stop()
        self._requests.put(None)
        thread.join(timeout=grace_s)
        job = self._job
        if thread.is_alive() and job is not None:
            self._stopped_by_kill = True
            job.kill()
        thread.join(timeout=grace_s)
        self._thread = None

    def _run(
        self, package: Path, ep: str, store_root: Path | None, conversation: str | None
    ) -> None:
        from mmforge.backend.chat.client import ChatClient

        def started(job: Any) -> None:
            self._job = job

        self._stopped_by_kill = False
        try:
            client = ChatClient(
                package, ep, store_root=store_root, conversation=conversation, started=started
            )
        except MmforgeError as e:
            self._job = None
            self._put("failed", _error(e.user_message, e.hint, e.details))
            self._put("closed", None)
            return
        self._client = client
        self._put("ready", SessionInfo.from_dict(client.info))
        try:
            while (request := self._requests.get()) is not None:
                name, args, system = request
                self._request_no += 1
                self._running = self._request_no
                self._put("busy", True)
                try:
                    if system is not None:
                        client.set_system(system)
                    result = getattr(client, name)(*args)
                    if isinstance(result, dict):
                        self._put("conversation", Conversation.from_dict(result))
                    else:
                        self._stream(result)
                except MmforgeError as e:
                    error = _error(e.user_message, e.hint, e.details)
                    if self._stopped_by_kill:
                        error = _error(
                            "The model did not stop when asked, so its worker was ended",
                            "Load the package again to go on with the conversation",
                        )
                    self._put("failed", error)
                    if self._stopped_by_kill:
                        break
                finally:
                    self._running = 0
                    self._put("busy", False)
        finally:
            self._client = None
            client.close()
            self._job = None
            self._put("closed", None)

    def _stream(self, events: Any) -> None:
        for event in events:
            kind = event.get("event")
            if kind in ("turn", "error"):
                self._running = 0  # ended: a Stop that timed out must not end the worker now
            if kind == "token":
                self._put("token", str(event.get("text", "")))
            elif kind == "note":
                self._put("note", str(event.get("text", "")))
            elif kind == "attachments":
                self._put("attachments", list(event.get("value") or []))
            elif kind == "turn":
                if event.get("conversation"):
                    self._put("conversation", Conversation.from_dict(event["conversation"]))
                self._put("turn", TurnResult.from_dict(event.get("value") or {}))
            elif kind == "error":
                self._put(
                    "failed",
                    _error(str(event.get("message")), event.get("hint"), event.get("details")),
                )
