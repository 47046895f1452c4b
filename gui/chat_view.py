"""Chat page: conversations with a package, streamed answers, attachments, Stop."""

from __future__ import annotations

import html
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Slot
from PySide6.QtGui import QImage, QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QSpinBox,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend.attachments import AUDIO, IMAGE, kind_of
from mmforge.backend.chat.conversations import Conversation, ConversationStore, Message
from mmforge.backend.chat.values import SessionInfo, TurnResult
from mmforge.gui.bridge import ChatBridge, JobRunner
from mmforge.gui.chat_input import AttachmentStrip, ChatInput
from mmforge.gui.errors import show_error
from mmforge.gui.markdown import STYLE, plain, to_html
from mmforge.gui.state import AppState

STOPS = {"eos": "end of answer", "length": "token limit", "stopped": "stopped"}


@dataclass
class Pending:
    """The turn in flight, shown until the worker reports the conversation it made.

    Attributes:
        replaces: Messages at the end of the conversation that the turn replaces
            (regenerate: the answer; edit: the last message and its answer).
        user: The user message sent, when the turn sends one.
        answer: The answer streamed so far.
    """

    replaces: int = 0
    user: Message | None = None
    answer: str = ""


def is_demo(package: Path) -> bool:
    """Whether a package was converted from the built-in demo checkpoint."""
    import json

    try:
        manifest = json.loads((package / "mmforge_manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return "mmforge/demo/" in str(manifest.get("source", ""))


class ChatView(QWidget):
    """Talk to a package; the session runs in a worker process."""

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.store = ConversationStore()  # read here for the list; the worker writes it
        self.bridge = ChatBridge(self)
        self.eps = JobRunner(self)
        self._scratch = tempfile.TemporaryDirectory(prefix="mmforge-paste-")
        body = QHBoxLayout()
        body.addLayout(self._conversation_list())
        body.addLayout(self._chat_column(), 1)
        layout = QVBoxLayout(self)
        layout.addLayout(self._package_row())
        layout.addWidget(self.info)
        layout.addLayout(body, 1)
        # What the worker last reported, and the turn in flight: no copy of our own.
        self.conversation: Conversation | None = None
        self.pending: Pending | None = None
        self.session_info: SessionInfo | None = None
        self._draft: tuple[str, list[tuple[Path, str]]] | None = None
        self._editing = False
        self._loaded = False
        self._busy = False
        self._render_timer = QTimer(self, singleShot=True, interval=100)
        self._render_timer.timeout.connect(self._scroll_to_end)
        self.bridge.ready.connect(self._on_ready)
        self.bridge.token.connect(self._on_token)
        self.bridge.turn.connect(self._on_turn)
        self.bridge.failed.connect(self._on_failed)
        self.bridge.conversation.connect(self._on_conversation)
        self.bridge.busy.connect(self._on_busy)
        self.bridge.closed.connect(self._on_closed)
        self.eps.succeeded.connect(self._on_eps)
        state.package_changed.connect(self.package.setText)
        state.package_changed.connect(self.refresh_library)
        self._update_buttons()
        self.refresh_conversations()
        self.refresh_library()
        self.eps.start("eps", {})

    def _package_row(self) -> QHBoxLayout:
        """Package, library, Choose…, provider, Load (and the info line below them)."""
        self.package = QLineEdit(self.state.package)
        self.library = QComboBox()
        self.library.setObjectName("library")
        self.library.setToolTip("Converted packages in the package folder")
        self.library.activated.connect(self._pick_library)
        choose = QPushButton("Choose…")
        choose.clicked.connect(self._choose_package)
        self.ep = QComboBox()
        self.ep.addItems(["cpu", "cuda"])
        self.load_button = QPushButton("Load")
        self.load_button.setObjectName("loadButton")
        self.load_button.clicked.connect(self.load)
        self.info = QLabel("")
        self.info.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(QLabel("Package"))
        top.addWidget(self.package, 1)
        for widget in (self.library, choose, self.ep, self.load_button):
            top.addWidget(widget)
        return top

    def _conversation_list(self) -> QVBoxLayout:
        """The saved conversations, New and Delete."""
        self.conversations = QListWidget()
        self.conversations.setMaximumWidth(240)
        self.conversations.itemClicked.connect(self._open)
        new = QPushButton("New")
        new.clicked.connect(self.bridge.new_conversation)
        self.delete_button = QPushButton("Delete…")
        self.delete_button.setToolTip("Delete the selected conversation (with a package loaded)")
        self.delete_button.clicked.connect(self._delete)
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("Save the open conversation as Markdown or JSON")
        self.export_button.clicked.connect(self._export)
        side = QVBoxLayout()
        side.addWidget(QLabel("Conversations"))
        side.addWidget(self.conversations, 1)
        row = QHBoxLayout()
        row.addWidget(new)
        row.addWidget(self.delete_button)
        row.addWidget(self.export_button)
        side.addLayout(row)
        return side

    def _chat_column(self) -> QVBoxLayout:
        """The transcript, the draft with its attachments, and the turn buttons."""
        self.transcript = QTextBrowser()
        self.transcript.setObjectName("transcript")
        self.transcript.document().setDefaultStyleSheet(STYLE)
        self.strip = AttachmentStrip()
        self.input = ChatInput()
        self.input.setObjectName("chatInput")
        self.input.send_requested.connect(self.send)
        self.input.stop_requested.connect(self.bridge.stop)
        self.input.files_added.connect(self._add_files)
        self.input.image_pasted.connect(self._add_image)
        centre = QVBoxLayout()
        centre.addWidget(self.transcript, 1)
        centre.addWidget(self.strip)
        centre.addWidget(self.input)
        centre.addLayout(self._turn_buttons())
        return centre

    def _turn_buttons(self) -> QHBoxLayout:
        attach = QPushButton("Attach…")
        attach.clicked.connect(self._pick)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("sendButton")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stopButton")
        self.stop_button.clicked.connect(self.bridge.stop)
        self.regen_button = QPushButton("Regenerate")
        self.regen_button.clicked.connect(self.regenerate)
        self.edit_button = QPushButton("Edit last")
        self.edit_button.clicked.connect(self.edit_last)
        self.max_tokens = QSpinBox(minimum=1, maximum=8192, value=256)
        self.max_tokens.setToolTip("Most tokens per answer")
        buttons = QHBoxLayout()
        for w in (attach, self.regen_button, self.edit_button):
            buttons.addWidget(w)
        buttons.addStretch(1)
        buttons.addWidget(QLabel("max tokens"))
        buttons.addWidget(self.max_tokens)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.send_button)
        return buttons

    # -- loading -------------------------------------------------------------------------

    @Slot(object)
    def _on_eps(self, eps: dict[str, Any]) -> None:
        model = self.ep.model()
        for i in range(self.ep.count()):
            reason = eps.get(self.ep.itemText(i))
            item = model.item(i)  # type: ignore[attr-defined]
            item.setEnabled(reason is None)
            item.setToolTip(reason or "")

    @Slot()
    def load(self) -> None:
        """Load the package in a chat worker."""
        package = self.package.text().strip()
        if not package:
            show_error(self, {"message": "Pick a package", "hint": "Convert a model first"})
            return
        self._loaded = False
        self.info.setText(f"Loading {package}…")
        self.load_button.setEnabled(False)
        self.bridge.load(Path(package), self.ep.currentText(), self.store.root)

    @Slot(object)
    def _on_ready(self, info: SessionInfo) -> None:
        self.session_info = info
        self._loaded = True
        self.load_button.setEnabled(True)
        caps = ["images"] if info.vision else []
        caps += ["audio"] if info.audio else []
        text = (
            f"{info.pipeline_type} on {info.ep.upper()}: loaded in "
            f"{info.load_s:.2f} s, {info.load_memory_bytes / 1e6:.0f} MB; "
            f"takes {' and '.join(caps) or 'text only'}."
        )
        if is_demo(Path(info.package)):
            text += (
                "<br><b>This is the random-weight demo model: it talks nonsense by design, "
                "while its parity with the original is exact.</b>"
            )
        self.info.setText(text)
        self._on_conversation(info.conversation)
        self._update_buttons()

    @Slot()
    def _on_closed(self) -> None:
        self.session_info = None
        self._loaded = False
        self.load_button.setEnabled(True)
        self._update_buttons()

    @Slot()
    def refresh_library(self) -> None:
        """List the packages in the package folder (and the current one)."""
        folders = {Path(self.state.package)} if self.state.package else set()
        root = self.state.packages_folder()
        if root.is_dir():
            folders |= {p.parent for p in root.glob("*/genai_config.json")}
        packages = sorted(str(p) for p in folders if (p / "genai_config.json").is_file())
        self.library.clear()
        self.library.addItem(f"Library ({len(packages)})")
        self.library.addItems(packages)

    @Slot(int)
    def _pick_library(self, index: int) -> None:
        if index > 0:
            self.package.setText(self.library.itemText(index))
        self.library.setCurrentIndex(0)

    @Slot()
    def _choose_package(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Package folder")
        if folder:
            self.package.setText(folder)

    # -- conversations -------------------------------------------------------------------

    def _list_item(self, conversation_id: str) -> QListWidgetItem | None:
        for i in range(self.conversations.count()):
            item = self.conversations.item(i)
            if item.data(Qt.ItemDataRole.UserRole) == conversation_id:
                return item
        return None

    def refresh_conversations(self) -> None:
        """Fill the conversation list from the store; the open one is selected."""
        self.conversations.clear()
        for s in self.store.list():
            item = QListWidgetItem(s.title or "(untitled)")
            item.setData(Qt.ItemDataRole.UserRole, s.id)
            item.setToolTip(f"{s.messages} messages with {s.package}")
            self.conversations.addItem(item)
        self._select_open()

    def _select_open(self) -> None:
        """Highlight the open conversation in the list."""
        current = self._list_item(self.conversation.id) if self.conversation else None
        if current is not None:
            self.conversations.setCurrentItem(current)

    @Slot(QListWidgetItem)
    def _open(self, item: QListWidgetItem) -> None:
        if self._loaded and not self._busy:
            self.bridge.open_conversation(str(item.data(Qt.ItemDataRole.UserRole)))

    @Slot()
    def _delete(self) -> None:
        item = self.conversations.currentItem()
        if item is None or not self._loaded or self._busy:
            return
        answer = QMessageBox.question(
            self,
            "Delete conversation",
            f"Delete “{item.text()}” and its attachments? This cannot be undone.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        if answer == QMessageBox.StandardButton.Yes:
            self.bridge.delete_conversation(str(item.data(Qt.ItemDataRole.UserRole)))

    @Slot()
    def _export(self) -> None:
        """Save the open conversation as Markdown (to read) or JSON (everything)."""
        conversation = self.conversation
        if conversation is None or not conversation.messages:
            show_error(self, {"message": "No conversation to export", "hint": "Chat first"})
            return
        name = "".join(c if c.isalnum() else "-" for c in conversation.title)[:40] or "chat"
        path, chosen = QFileDialog.getSaveFileName(
            self, "Export conversation", name, "Markdown (*.md);;JSON (*.json)"
        )
        if path:
            self.export_to(Path(path), as_json="JSON" in chosen or path.endswith(".json"))

    def export_to(self, path: Path, *, as_json: bool) -> None:
        """Write the open conversation to `path`; a failure is one dialog."""
        from mmforge.backend.chat.conversations import to_markdown

        assert self.conversation is not None
        text = (
            json.dumps(self.conversation.to_dict(), indent=2, ensure_ascii=False)
            if as_json
            else to_markdown(self.conversation)
        )
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as e:
            show_error(self, {"message": f"Could not write {path}", "hint": str(e)})

    @Slot(object)
    def _on_conversation(self, conversation: Conversation) -> None:
        after_turn = self.pending is not None
        self.conversation = conversation
        self.pending = None
        self._render()
        # Reading every saved conversation is disk work on the GUI thread: after a turn of
        # a conversation already listed, update its entry only.
        listed = self._list_item(conversation.id)
        if after_turn and listed is not None:
            listed.setToolTip(f"{len(conversation.messages)} messages with {conversation.package}")
            self._select_open()
        else:
            self.refresh_conversations()

    # -- attachments ---------------------------------------------------------------------

    @Slot()
    def _pick(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(
            self,
            "Attach",
            "",
            "Images and audio (*.png *.jpg *.jpeg *.webp *.bmp *.gif *.wav *.flac *.ogg)",
        )
        self._add_files(files)

    @Slot(list)
    def _add_files(self, files: list[str]) -> None:
        for f in files:
            kind = kind_of(Path(f))
            refusal = self._refusal(kind)
            if refusal is not None:  # said now, not at Send; the draft stays as it is
                show_error(
                    self,
                    {
                        "message": f"{Path(f).name} was not attached: {refusal}",
                        "hint": "Load a package whose model takes it",
                    },
                )
                continue
            self.strip.add(Path(f), kind)

    def _refusal(self, kind: str) -> str | None:
        """Why the loaded package cannot take this kind of attachment (None: it can)."""
        info = self.session_info
        if info is None:
            return None  # nothing loaded yet: checked when the message is sent
        takes = {IMAGE: info.vision, AUDIO: info.audio}.get(kind, False)
        if takes:
            return None
        what = "images" if kind == IMAGE else "audio" if kind == AUDIO else "this kind of file"
        return f"this model ({info.pipeline_type}) does not take {what}"

    @Slot(QImage)
    def _add_image(self, image: QImage) -> None:
        path = Path(self._scratch.name) / f"pasted-{len(self.strip.files) + 1}.png"
        # PySide6 6.11 takes the format as a str (bytes raise ValueError; its stubs say bytes).
        if image.isNull() or not image.save(str(path), "PNG"):  # type: ignore[call-overload]
            show_error(
                self,
                {
                    "message": "The pasted image could not be attached",
                    "hint": "Save it to a file and attach the file",
                },
            )
            return
        self._add_files([str(path)])

    # -- turns ---------------------------------------------------------------------------

    def _options(self) -> dict[str, Any]:
        return {"max_new_tokens": self.max_tokens.value()}

    @Slot()
    def send(self) -> None:
        """Send the draft (or the edited last message)."""
        text = self.input.toPlainText().strip()
        files = list(self.strip.files)
        if not self._loaded or self._busy or (not text and not files):
            return
        self._draft = (text, files)
        self.input.clear()
        self.strip.set_files([])
        names = [p.name for p, _ in files]
        if self._editing:
            self._editing = False
            self._begin_turn(self._tail_from_last_user(), text, names or ["(kept attachments)"])
            self.bridge.edit_last(text, self._options())
        else:
            self._begin_turn(0, text, names)
            self.bridge.send(text, files, self._options())

    def _messages(self) -> list[Message]:
        return self.conversation.messages if self.conversation is not None else []

    def _tail_from_last_user(self) -> int:
        """How many messages the last user message and what follows it make."""
        messages = self._messages()
        for back, m in enumerate(reversed(messages), start=1):
            if m.role == "user":
                return back
        return 0

    def _begin_turn(self, replaces: int, text: str | None, names: list[str]) -> None:
        from mmforge.backend.attachments import Attachment

        user = None
        if text is not None:
            shown = [Attachment(kind="", path=Path(n), name=n) for n in names]
            user = Message(role="user", text=text, attachments=shown)
        self.pending = Pending(replaces=replaces, user=user)
        self._render()

    @Slot()
    def regenerate(self) -> None:
        """Answer the last message again."""
        messages = self._messages()
        if not self._loaded or self._busy or not messages:
            return
        self._draft = None
        self._begin_turn(1 if messages[-1].role == "assistant" else 0, None, [])
        self.bridge.regenerate(self._options())

    @Slot()
    def edit_last(self) -> None:
        """Put the last user message back in the input for editing."""
        last = next((m for m in reversed(self._messages()) if m.role == "user"), None)
        if last is None or self._busy:
            return
        self.input.setPlainText(last.text)
        self._editing = True
        self.input.setFocus()

    @Slot(str)
    def _on_token(self, text: str) -> None:
        # Streaming costs one text insertion per token; the Markdown render of the whole
        # answer happens once, when it ends (re-rendering per token stalled the window).
        if self.pending is None:
            return
        first = not self.pending.answer
        self.pending.answer += text
        if first:
            self._render(streaming=True)
        cursor = self.transcript.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text)
        if not self._render_timer.isActive():
            self._render_timer.start()

    @Slot(object)
    def _on_turn(self, turn: TurnResult) -> None:
        # The worker reported the conversation this turn made just before (it is drawn).
        self._draft = None

    @Slot(dict)
    def _on_failed(self, error: dict[str, Any]) -> None:
        self.pending = None
        if self._draft is not None:
            # Nothing is lost: the message and its attachments go back into the draft.
            text, files = self._draft
            self.input.setPlainText(text)
            self.strip.set_files(files)
            self._draft = None
            self._render()
        if not self._loaded:
            self.info.setText(f"Not loaded: {error.get('message')}")
            self.load_button.setEnabled(True)
        show_error(self, error)

    @Slot(bool)
    def _on_busy(self, busy: bool) -> None:
        self._busy = busy
        self._update_buttons()

    def _update_buttons(self) -> None:
        ready = self._loaded and not self._busy
        for b in (self.send_button, self.regen_button, self.edit_button, self.delete_button):
            b.setEnabled(ready)
        self.stop_button.setEnabled(self._loaded and self._busy)

    @Slot()
    def _scroll_to_end(self) -> None:
        bar = self.transcript.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _render(self, streaming: bool = False) -> None:
        """Redraw the transcript.

        While `streaming`, the last answer is left open at the end, for tokens to be
        appended as plain text.
        """
        messages = list(self._messages())
        pending = self.pending
        if pending is not None:
            messages = messages[: len(messages) - pending.replaces]
            if pending.user is not None:
                messages.append(pending.user)
        parts = [_message_html(m) for m in messages]
        if pending is not None:
            if streaming:
                parts.append("<div><b>Model</b></div><p></p>")
            else:
                answer = Message(role="assistant", text=pending.answer)
                parts.append(_message_html(answer))
        self.transcript.setHtml("".join(parts))
        self._scroll_to_end()

    def shutdown(self) -> None:
        """Close the worker (on window close)."""
        self.eps.shutdown()
        self.bridge.close()
        self._scratch.cleanup()


def _message_html(m: Message) -> str:
    """One message of the transcript."""
    if m.role == "user":
        files = "".join(
            f"<span style='background:#ddf4ff'>&nbsp;{html.escape(a.name)}&nbsp;</span> "
            for a in m.attachments
        )
        return f"<div><b>You</b> {files}{plain(m.text)}</div>"
    body = to_html(m.text) if m.text else "<p><i>…</i></p>"
    stats = m.stats
    line = ""
    if stats:
        # How the answer ended, in words; an answer saved before that was recorded says
        # nothing rather than the engine's internal word for how it read the prompt.
        ended = STOPS.get(m.stop_reason)
        line = (
            f"<p style='color:#57606a;font-size:small'>{stats.get('new_tokens')} "
            f"tokens · first after {stats.get('time_to_first_token_s', 0):.2f} s · "
            f"{stats.get('decode_tokens_per_s', 0):.1f} tokens/s"
            + (f" · {ended}" if ended else "")
            + "</p>"
        )
    return f"<div><b>Model</b>{body}{line}</div><hr>"
