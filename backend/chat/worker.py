"""Chat in a worker process: the session loop on the worker side (`chat.client` is the other).

onnxruntime-genai holds the GIL while it computes a token, so a chat running in the GUI's
process would freeze it; the session lives in `mmforge worker` instead and speaks the same
JSON-lines protocol as conversion, with more commands, because a chat lasts many turns.

Commands (one JSON object a line; `seq` numbers a request so a late Stop cannot stop the
next one):
    {"cmd": "run", "job": "chat", "args": {"package", "ep", "save", "store_root",
                                           "conversation"}}
    {"cmd": "send", "seq", "text", "attachments": [{"path", "kind"}], "options": {...}}
    {"cmd": "regenerate", "seq", "options"}
    {"cmd": "edit", "seq", "text", "attachments": [...] | null, "options"}
    {"cmd": "answer", "seq", "system", "history": [{"role", "text", "attachments"}],
     "text", "attachments", "options"}   a turn of its own: a fresh unsaved conversation
                                         holding `history`, answered (`mmforge serve`)
    {"cmd": "stop", "seq"}            (between two tokens; no seq: the current request)
    {"cmd": "new"} | {"cmd": "open", "id"} | {"cmd": "delete", "id"} | {"cmd": "close"}
    {"cmd": "rename", "id", "title"} | {"cmd": "system", "text"}  (the open conversation's)
Events:
    {"event": "ready", "value": SessionInfo}                 once, after the model loaded
    {"event": "attachments", "seq", "value": [...]}          what was prepared (and notes)
    {"event": "note", "seq", "text"}                         what the session does first
                                                             (summarising a full one)
    {"event": "token", "seq", "text", "id"}                  one per answer token
    {"event": "turn", "seq", "value": TurnResult, "conversation": Conversation}
    {"event": "conversation", "value": Conversation}         after new, open or delete
    {"event": "error", "seq", "message", "hint", "details"}  the session goes on
    {"event": "closed"}
"""

from __future__ import annotations

import queue
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from mmforge.backend.chat.values import GenerationOptions, SessionInfo, TurnResult
from mmforge.backend.errors import MmforgeError
from mmforge.backend.worker.protocol import error_event, read_command

Send = Callable[[dict[str, Any]], None]


def serve_chat(args: dict[str, Any], stdin: IO[str], send: Send) -> int:
    """The worker side: load the package, then answer commands until close or EOF."""
    commands: queue.Queue[dict[str, Any]] = queue.Queue()
    stopped: set[int | None] = set()
    lock = threading.Lock()

    def listen() -> None:
        while True:
            command = read_command(stdin)
            if command is None:  # the client went away: stop and close
                with lock:
                    stopped.add(None)
                commands.put({"cmd": "close"})
                return
            if command.get("cmd") in ("stop", "cancel"):
                with lock:
                    stopped.add(command.get("seq"))
                continue
            commands.put(command)

    def on_term(*_: Any) -> None:
        with lock:
            stopped.add(None)
        commands.put({"cmd": "close"})

    signal.signal(signal.SIGTERM, on_term)
    # Ctrl+C in a terminal reaches the whole process group; the client decides what it
    # means (the CLI sends Stop), so the worker ignores it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=listen, daemon=True).start()
    try:
        loop = _ChatLoop(args, send, stopped, lock)
    except MmforgeError as e:
        send(error_event(e))
        return 2
    send({"event": "ready", "value": loop.ready()})
    while True:
        command = commands.get()
        if command.get("cmd") == "close":
            break
        loop.handle(command)
    loop.session.close()
    send({"event": "closed"})
    return 0


class _ChatLoop:
    """Runs each command against one `ChatSession` and reports events."""

    def __init__(self, args: dict[str, Any], send: Send, stopped: set[int | None], lock: Any):
        from mmforge.backend.chat import ChatSession
        from mmforge.backend.chat.conversations import ConversationStore

        self.send = send
        self.stopped = stopped
        self.lock = lock
        self.store: ConversationStore | None = None
        if args.get("save", True):
            root = args.get("store_root")
            self.store = ConversationStore(Path(root) if root else None)
        conversation = None
        if args.get("conversation"):
            if self.store is None:
                raise MmforgeError(
                    "Opening a saved conversation needs a session that saves",
                    "Start the chat with saving on",
                )
            conversation = self.store.load(str(args["conversation"]))
        self.session = ChatSession(
            Path(str(args["package"])),
            str(args.get("ep", "cpu")),
            store=self.store,
            conversation=conversation,
        )

    def ready(self) -> dict[str, Any]:
        s = self.session
        return SessionInfo(
            package=str(s.info.folder),
            pipeline_type=s.info.pipeline_type,
            vision=s.info.vision,
            audio=s.info.audio,
            ep=s.ep,
            load_s=round(s.load_s, 3),
            load_memory_bytes=s.load_memory_bytes,
            conversation=s.conversation,
        ).to_dict()

    def _conversation(self) -> dict[str, Any]:
        return self.session.conversation.to_dict()

    def handle(self, command: dict[str, Any]) -> None:
        """Run one command; its events (or an error event) go to the client."""
        name = command.get("cmd")
        seq = command.get("seq")
        try:
            if name in ("new", "open", "delete", "rename", "system"):
                self._manage(str(name), command)
                self.send({"event": "conversation", "value": self._conversation()})
            elif name in ("send", "regenerate", "edit", "answer"):
                result = self._turn(str(name), seq, command)
                self.send(
                    {
                        "event": "turn",
                        "seq": seq,
                        "value": result.to_dict(),
                        "conversation": self._conversation(),
                    }
                )
            else:
                raise MmforgeError(
                    f"Unknown chat command {name!r}",
                    "Use send, regenerate, edit, stop, new, open, delete, rename, system or close",
                )
        except Exception as e:  # noqa: BLE001 - the session survives; the client shows it
            self.send(error_event(e, seq=seq))
        finally:
            with self.lock:
                self.stopped.discard(seq)

    def _manage(self, name: str, command: dict[str, Any]) -> None:
        """new, open, delete or rename a conversation, or set its system prompt."""
        if name == "new":
            self.session.new_conversation()
            return
        if name == "system":
            self.session.set_system(str(command.get("text", "")))
            return
        if name == "rename" and command.get("id") == self.session.conversation.id:
            self.session.rename(str(command.get("title", "")))
            return
        if self.store is None:
            raise MmforgeError(
                "Conversations are not saved in this session",
                "Start the chat with saving on to manage saved ones",
            )
        conversation_id = str(command.get("id"))
        if name == "open":
            self.session.open_conversation(self.store.load(conversation_id))
            return
        if name == "rename":
            self.store.rename(conversation_id, str(command.get("title", "")))
            return
        if conversation_id == self.session.conversation.id:
            self.session.new_conversation()  # a deleted conversation cannot stay open
        self.store.delete(conversation_id)

    def _turn(self, name: str, seq: Any, command: dict[str, Any]) -> TurnResult:
        """send, regenerate or edit: one answer, streamed as token events."""
        options = GenerationOptions.from_dict(command.get("options"))
        # A Stop for this request may have come before the request began (the client
        # stops right after sending on a signal): it counts. Each request has its own
        # seq, so a late Stop of an earlier one cannot stop this one.

        def should_stop() -> bool:
            return seq in self.stopped or None in self.stopped

        def on_token(text: str, token: int) -> None:
            self.send({"event": "token", "seq": seq, "text": text, "id": token})

        def on_note(text: str) -> None:
            self.send({"event": "note", "seq": seq, "text": text})

        if name == "regenerate":
            return self.session.regenerate(options, on_token, should_stop, on_note=on_note)
        if name == "answer":
            return self._answer(command, options, on_token, should_stop)
        files = command.get("attachments")
        attachments = None
        if files is not None:
            pairs = [(Path(str(f["path"])), str(f["kind"])) for f in files]
            attachments = self.session.prepare_attachments(pairs)
            value = [a.to_dict() for a in attachments]
            self.send({"event": "attachments", "seq": seq, "value": value})
        text = str(command.get("text", ""))
        if name == "send":
            return self.session.send(
                text, attachments or [], options, on_token, should_stop, on_note=on_note
            )
        return self.session.edit_last(
            text, attachments, options, on_token, should_stop, on_note=on_note
        )

    def _answer(
        self,
        command: dict[str, Any],
        options: GenerationOptions,
        on_token: Callable[[str, int], None],
        should_stop: Callable[[], bool],
    ) -> TurnResult:
        """A turn of its own (`mmforge serve`): the request's history, then its message.

        Every attachment of the request goes through `prepare_attachments` at once (so the
        package's image limit counts them all); the prepared copies are removed after.
        An attachment the model cannot take is an error of kind "attachment".
        """
        from mmforge.backend.attachments import AttachmentError
        from mmforge.backend.chat.conversations import Conversation, Message

        session = self.session
        history = list(command.get("history") or [])
        turns = [
            *history,
            {
                "role": "user",
                "text": command.get("text", ""),
                "attachments": command.get("attachments") or [],
            },
        ]
        files = [(Path(str(f["path"])), str(f["kind"])) for t in turns for f in t["attachments"]]
        session.new_conversation()
        prepared = []
        try:
            try:
                prepared = session.prepare_attachments(files)
            except AttachmentError as e:
                raise MmforgeError(e.user_message, e.hint, e.details, kind="attachment") from None
            messages, at = [], 0
            for t in turns:
                n = len(t["attachments"])
                messages.append(Message(str(t["role"]), str(t["text"]), prepared[at : at + n]))
                at += n
            last = messages.pop()
            session.open_conversation(
                Conversation(
                    id="unsaved",
                    package=str(session.info.folder),
                    system=str(command.get("system", "")),
                    messages=messages,
                )
            )
            return session.send(last.text, last.attachments, options, on_token, should_stop)
        finally:
            for a in prepared:
                a.path.unlink(missing_ok=True)
