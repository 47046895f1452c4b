"""Chat page: conversations with a package, streamed answers, attachments, Stop.

The parts live beside it: `transcript` (the drawn conversation), `conversation_list`,
`chat_settings`, `chat_input` (the draft) and `chat_turns` (the turn state, no widgets).
Saved conversations are read from disk here, so reading, renaming, exporting and deleting
one needs no model; the worker writes the conversation it holds.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QTimer, QUrl, Slot
from PySide6.QtGui import QDesktopServices, QImage, QKeySequence, QShortcut, QTextCursor
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend.attachments import AUDIO, IMAGE, NO_VIDEO, VIDEO, kind_of
from mmforge.backend.chat.conversations import (
    Conversation,
    ConversationStore,
    Message,
    short_title,
)
from mmforge.backend.chat.values import SessionInfo, TurnResult
from mmforge.backend.errors import MmforgeError
from mmforge.backend.vocabulary import EPS
from mmforge.gui.bridge import ChatBridge, JobRunner
from mmforge.gui.chat_input import AttachmentStrip, ChatInput, StatusLine
from mmforge.gui.chat_settings import ChatSettings
from mmforge.gui.chat_turns import (
    Pending,
    is_demo,
    last_user,
    messages_of,
    same_package,
    shown_messages,
    tail_from_last_user,
)
from mmforge.gui.conversation_list import ConversationList
from mmforge.gui.errors import show_error
from mmforge.gui.markdown import code_blocks
from mmforge.gui.safe_text import StreamBreaker, as_html, for_display, plain_label
from mmforge.gui.state import AppState
from mmforge.gui.theme import colours, stylesheet
from mmforge.gui.transcript import (
    MARK,
    Transcript,
    continued_html,
    empty_html,
    forgotten_html,
    message_html,
    summary_html,
)

__all__ = ["ChatView", "is_demo"]


class ChatView(QWidget):
    """Talk to a package; the session runs in a worker process."""

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.store = ConversationStore()  # read here; the worker writes the one it holds
        self.bridge = ChatBridge(self)
        self.eps = JobRunner(self)
        self._scratch = tempfile.TemporaryDirectory(prefix="mmforge-paste-")
        self.conversation_list = ConversationList()
        self.conversations = self.conversation_list.items
        self.settings_box = ChatSettings(state)
        self.settings_box.setVisible(False)
        body = QHBoxLayout()
        body.addWidget(self.conversation_list)
        body.addLayout(self._chat_column(), 1)
        layout = QVBoxLayout(self)
        layout.addLayout(self._package_row())
        layout.addWidget(self.info)
        layout.addLayout(body, 1)
        # What the worker last reported (or what was read from disk), and the turn in
        # flight: no copy of our own.
        self.conversation: Conversation | None = None
        self.local = False  # the conversation shown is read from disk, not the worker's
        self.pending: Pending | None = None
        self.session_info: SessionInfo | None = None
        self._draft: tuple[str, list[tuple[Path, str]]] | None = None
        self._editing = False
        self._loaded = False
        self._loaded_written: int | None = None  # when the loaded package was written
        self._busy = False
        self._stream_cursor: QTextCursor | None = None
        self._stream_shown = StreamBreaker()
        self._shown: list[Message] = []
        self._tokens, self._first_token_at = 0, 0.0
        self._render_timer = QTimer(self, singleShot=True, interval=100)
        self._render_timer.timeout.connect(self._scroll_to_end)
        self._render_timer.timeout.connect(self._show_progress)
        self._connect()
        self.refresh_conversations()
        self.refresh_library()
        self.eps.start("eps", {})
        self._update_buttons()
        self._render()

    def _connect(self) -> None:
        self.bridge.ready.connect(self._on_ready)
        self.bridge.token.connect(self._on_token)
        self.bridge.turn.connect(self._on_turn)
        self.bridge.failed.connect(self._on_failed)
        self.bridge.conversation.connect(self._on_conversation)
        self.bridge.busy.connect(self._on_busy)
        self.bridge.closed.connect(self._on_closed)
        self.eps.succeeded.connect(self._on_eps)
        self.state.package_changed.connect(self._package_changed)
        self.state.package_changed.connect(self.refresh_library)
        self.state.library_changed.connect(self.refresh_library)
        lst = self.conversation_list
        lst.open_requested.connect(self.open_conversation)
        lst.new_requested.connect(self.new_conversation)
        lst.rename_requested.connect(self.rename_open)
        lst.delete_requested.connect(self.delete_open)
        lst.export_requested.connect(self._export)
        # Esc stops the answer wherever the focus is on this page.
        stop = QShortcut(QKeySequence("Esc"), self)
        stop.setContext(stop.context().WidgetWithChildrenShortcut)
        stop.activated.connect(self.stop)

    @property
    def max_tokens(self) -> QSpinBox:
        """The answer cap (in the settings)."""
        return self.settings_box.max_tokens

    @property
    def system(self) -> QPlainTextEdit:
        """The open conversation's system prompt (in the settings)."""
        return self.settings_box.system

    def _package_row(self) -> QHBoxLayout:
        """Package, library, Choose…, provider, Load (and the info line below them)."""
        self.package = QLineEdit(self.state.package)
        self.package.setAccessibleName("Package folder")
        self.package.returnPressed.connect(self.load)
        self.library = QComboBox()
        self.library.setObjectName("library")
        self.library.setToolTip("Converted packages in the package folder")
        self.library.setMaximumWidth(220)
        self.library.activated.connect(self._pick_library)
        choose = QPushButton("Choose…")
        choose.clicked.connect(self.choose_package)
        self.ep = QComboBox()
        self.ep.addItems(list(EPS))
        self.ep.setAccessibleName("Run on")
        self.load_button = QPushButton("Load")
        self.load_button.setObjectName("loadButton")
        self.load_button.clicked.connect(self.load)
        self.info = plain_label(wrap=True)
        top = QHBoxLayout()
        top.addWidget(QLabel("Package"))
        top.addWidget(self.package, 1)
        for widget in (self.library, choose, self.ep, self.load_button):
            top.addWidget(widget)
        return top

    def _chat_column(self) -> QVBoxLayout:
        """The transcript, the continue bar, the draft and the turn buttons."""
        self.transcript = Transcript()
        self.transcript.setObjectName("transcript")
        self.transcript.setAccessibleName("Conversation")
        self.transcript.anchorClicked.connect(self._on_anchor)
        self.transcript.files_dropped.connect(self._add_files)
        self.status = StatusLine()
        self.status.setObjectName("chatStatus")
        self.continue_note = plain_label(wrap=True)
        self.continue_button = QPushButton("Load its model to continue")
        self.continue_button.setObjectName("continueButton")
        self.continue_button.clicked.connect(self.continue_open)
        continue_row = QHBoxLayout()
        continue_row.addWidget(self.continue_note, 1)
        continue_row.addWidget(self.continue_button)
        self.continue_bar = QWidget()
        self.continue_bar.setObjectName("continueBar")
        self.continue_bar.setLayout(continue_row)
        self.continue_bar.setVisible(False)
        self.strip = AttachmentStrip()
        self.strip.setVisible(False)
        self.input = ChatInput()
        self.input.setObjectName("chatInput")
        self.input.setAccessibleName("Message")
        self.input.setMaximumHeight(80)
        self.input.setPlaceholderText(
            "Type a message. Enter sends, Shift+Enter starts a new line; paste or drop "
            "an image to attach it."
        )
        self.input.send_requested.connect(self.send)
        self.input.stop_requested.connect(self.stop)
        self.input.files_added.connect(self._add_files)
        self.input.image_pasted.connect(self._add_image)
        centre = QVBoxLayout()
        centre.addWidget(self.transcript, 1)
        centre.addWidget(self.status)
        centre.addWidget(self.continue_bar)
        centre.addWidget(self.settings_box)
        centre.addWidget(self.strip)
        centre.addWidget(self.input)
        centre.addLayout(self._turn_buttons())
        return centre

    def _turn_buttons(self) -> QHBoxLayout:
        attach = QPushButton("Attach…")
        attach.setToolTip("Attach an image or audio clip (or paste or drop one)")
        attach.clicked.connect(self._pick)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("sendButton")
        self.send_button.setDefault(True)
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stopButton")
        self.stop_button.setToolTip("Stop the answer (Esc)")
        self.stop_button.clicked.connect(self.stop)
        self.regen_button = QPushButton("Regenerate")
        self.regen_button.setToolTip("Answer the last message again")
        self.regen_button.clicked.connect(self.regenerate)
        self.edit_button = QPushButton("Edit last")
        self.edit_button.setToolTip("Put your last message back in the box to change it")
        self.edit_button.clicked.connect(self.edit_last)
        self.settings_button = QPushButton("Settings")
        self.settings_button.setCheckable(True)
        self.settings_button.setToolTip(
            "System prompt, answer length, variety, and what happens when the conversation "
            "gets too long"
        )
        self.settings_button.toggled.connect(self.settings_box.setVisible)
        buttons = QHBoxLayout()
        for w in (attach, self.regen_button, self.edit_button, self.settings_button):
            buttons.addWidget(w)
        buttons.addStretch(1)
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
    def load(self, conversation: str | None = None) -> None:
        """Load the package in the Package field in a chat worker.

        `conversation`: the saved conversation to continue (default: a new one).
        """
        package = self.package.text().strip()
        if not package:
            show_error(self, {"message": "Pick a package", "hint": "Convert a model first"})
            return
        self._loaded = False
        self.session_info = None
        if self.conversation is not None and not self.local:
            # The worker goes: what it held is the saved copy now (or nothing, if empty).
            self._show_local(self.conversation if self.conversation.messages else None)
        self.info.setText(for_display(f"Loading {package}…", 2000))
        self.status.setText(f"Loading {Path(package).name}…")
        self.load_button.setEnabled(False)
        self._update_buttons()
        self.bridge.load(
            Path(package), self.ep.currentText(), self.store.root, conversation or None
        )

    def chat_with(self, package: str) -> None:
        """Chat with this package: load it unless it is the one loaded (Chat with it →)."""
        self.package.setText(package)
        info = self.session_info
        if (
            self._loaded
            and info is not None
            and same_package(info.package, package)
            and _written_at(Path(package)) == self._loaded_written
        ):
            self.input.setFocus()
            return
        self.load()  # another package, or this one converted again since it was loaded

    @Slot(str)
    def _package_changed(self, package: str) -> None:
        """Another page picked a package: named here; the loaded one answers until Load."""
        self.package.setText(package)
        info = self.session_info
        if self._loaded and info is not None and not same_package(info.package, package):
            self.info.setText(
                for_display(
                    f"{Path(info.package).name} is loaded; press Load to chat with "
                    f"{Path(package).name} instead.",
                    2000,
                )
            )

    @Slot(object)
    def _on_ready(self, info: SessionInfo) -> None:
        self.session_info = info
        self._loaded = True
        self.state.loaded_package = str(info.package)
        self._loaded_written = _written_at(Path(info.package))
        self.load_button.setEnabled(True)
        self.status.setText("")
        caps = ["images"] if info.vision else []
        caps += ["audio"] if info.audio else []
        text = (
            f"{Path(info.package).name}: {info.pipeline_type} on {info.ep.upper()}, loaded in "
            f"{info.load_s:.2f} s, {info.load_memory_bytes / 1e6:.0f} MB; "
            f"takes {' and '.join(caps) or 'text only'}."
        )
        if is_demo(Path(info.package)):
            text += (
                "\nThis is the random-weight demo model: it talks nonsense by design, "
                "while its parity with the original is exact."
            )
        self.info.setText(text)
        self._on_conversation(info.conversation)
        self.input.setFocus()  # typing after Load goes into the message box

    @Slot()
    def _on_closed(self) -> None:
        self.session_info = None
        self._loaded = False
        self.state.loaded_package = ""
        self.load_button.setEnabled(True)
        if self.status.text().startswith("Loading"):
            self.status.setText("")
        if self.conversation is not None and not self.local:
            self._show_local(self.conversation if self.conversation.messages else None)
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
        picked = self.library.itemText(index) if index > 0 else ""
        self.library.setCurrentIndex(0)
        if not picked:
            return
        if not (Path(picked) / "genai_config.json").is_file():
            # Deleted since the list was read: say so; the loaded model keeps answering.
            self.refresh_library()
            self.info.setText(
                for_display(f"{Path(picked).name} is no longer there (deleted or moved).", 2000)
            )
            return
        self.package.setText(picked)

    @Slot()
    def choose_package(self) -> None:
        """Pick a package folder and load it."""
        folder = QFileDialog.getExistingDirectory(self, "Package folder")
        if folder:
            self.package.setText(folder)
            self.load()

    # -- conversations -------------------------------------------------------------------

    def refresh_conversations(self) -> None:
        """Fill the conversation list from the store; the open one is selected."""
        self.conversation_list.fill(self.store.list())
        self._ensure_listed()

    def _ensure_listed(self) -> None:
        """List the open conversation even before the worker first saves it."""
        conversation = self.conversation
        if conversation is not None:
            pending = self.pending.user if self.pending is not None else None
            title = conversation.title or short_title(pending.text if pending else "")
            listed = self.conversation_list.item_for(conversation.id)
            if listed is None or conversation.title or pending:
                self.conversation_list.ensure(
                    conversation.id, title or "New conversation", conversation.updated
                )
        self.conversation_list.select(conversation.id if conversation else None)

    def _worker_holds(self, conversation_id: str | None) -> bool:
        """Whether the loaded worker holds this conversation (the one it last reported)."""
        c = self.conversation
        return self._loaded and not self.local and c is not None and c.id == conversation_id

    @Slot(str)
    def open_conversation(self, conversation_id: str) -> None:
        """Show a saved conversation; the worker continues it when its model is loaded."""
        if self.conversation is not None and conversation_id == self.conversation.id:
            return  # already shown (a new one is listed before it is saved)
        if self._busy:
            self._ensure_listed()  # the turn in flight stays shown
            return
        try:
            saved = self.store.load(conversation_id)
        except MmforgeError as e:
            show_error(self, {"message": e.user_message, "hint": e.hint})
            self.refresh_conversations()
            return
        info = self.session_info
        if self._loaded and info is not None and same_package(info.package, saved.package):
            self.bridge.open_conversation(conversation_id)
        self._show_local(saved)

    def _show_local(self, conversation: Conversation | None) -> None:
        """Show a conversation read from disk (or none)."""
        self.conversation = conversation
        self.local = True
        self.pending = None
        if conversation is not None:
            self._show_system(conversation)
        self._render()
        self._ensure_listed()
        self._update_buttons()

    @Slot()
    def continue_open(self) -> None:
        """Load the package the shown conversation was made with, continuing it."""
        conversation = self.conversation
        if conversation is None or self._busy:
            return
        self.package.setText(conversation.package)
        self.load(conversation.id)

    @Slot()
    def new_conversation(self) -> None:
        """Start an empty conversation (listed at once)."""
        if self._busy:
            return
        if self._loaded:
            self.bridge.new_conversation()
        else:
            self._show_local(None)
            self.package.setFocus()

    @Slot()
    def rename_open(self) -> None:
        """Give the shown conversation a title (no model needed)."""
        conversation = self.conversation
        if conversation is None or self._busy:
            return
        title, ok = QInputDialog.getText(
            self, "Rename conversation", "Title", text=conversation.title or ""
        )
        if not ok or not title.strip():
            return
        if self._worker_holds(conversation.id):
            self.bridge.rename_conversation(conversation.id, title)
            return
        try:
            self._show_local(self.store.rename(conversation.id, title))
        except MmforgeError as e:
            show_error(self, {"message": e.user_message, "hint": e.hint})
        self.refresh_conversations()

    @Slot()
    def delete_open(self) -> None:
        """Delete the shown conversation, after asking (no model needed)."""
        conversation = self.conversation
        if conversation is None or self._busy:
            return
        title = conversation.title or "this conversation"
        answer = QMessageBox.question(
            self,
            "Delete conversation",
            as_html(f"Delete “{title}” and its attachments? This cannot be undone."),
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        if answer != QMessageBox.StandardButton.Yes:
            return
        if self._worker_holds(conversation.id):
            self.bridge.delete_conversation(conversation.id)
            return
        if self.store.saved(conversation.id):
            self.store.delete(conversation.id)
        self._show_local(None)
        self.refresh_conversations()
        if self._loaded:
            self.bridge.new_conversation()

    @Slot()
    def _export(self) -> None:
        """Save the shown conversation as Markdown (to read) or JSON (everything)."""
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
        """Write the shown conversation to `path`; a failure is one dialog.

        Markdown links its pictures and recordings, copied into `<name>_files` beside it.
        """
        from mmforge.backend.chat.conversations import to_markdown

        assert self.conversation is not None
        try:
            if as_json:
                text = json.dumps(self.conversation.to_dict(), indent=2, ensure_ascii=False)
            else:
                text = to_markdown(self.conversation, self._export_files(path))
            path.write_text(text, encoding="utf-8")
        except OSError as e:
            show_error(self, {"message": f"Could not write {path}", "hint": str(e)})

    def _export_files(self, path: Path) -> dict[Path, str]:
        """Copy the attachments beside the Markdown file; their relative links."""
        from mmforge.gui.safe_text import is_regular_file

        assert self.conversation is not None
        folder = path.parent / f"{path.stem}_files"
        links: dict[Path, str] = {}
        for m in self.conversation.messages:
            for a in m.attachments:
                if a.path in links or not is_regular_file(a.path):
                    continue
                folder.mkdir(exist_ok=True)
                target = folder / f"{len(links) + 1}-{a.path.name}"
                shutil.copyfile(a.path, target)
                links[a.path] = f"{folder.name}/{target.name}"
        return links

    def _show_system(self, conversation: Conversation) -> None:
        # A saved conversation shows its own system prompt; a new, empty one keeps what the
        # box holds, to be applied with its first message.
        held = conversation.messages or conversation.system
        if held and self.system.toPlainText().strip() != conversation.system:
            self.system.setPlainText(conversation.system)

    @Slot(object)
    def _on_conversation(self, conversation: Conversation) -> None:
        after_turn = self.pending is not None
        self.conversation = conversation
        self.local = False
        self.pending = None
        self.status.setText("")
        self._show_system(conversation)
        self._render()
        # Reading every saved conversation is disk work on the GUI thread: after a turn of
        # a conversation already listed, update its entry only.
        listed = self.conversation_list.item_for(conversation.id)
        if after_turn and listed is not None:
            self.conversation_list.refresh_entry(
                conversation.id,
                conversation.title,
                conversation.updated,
                f"{len(conversation.messages)} messages with {conversation.package}",
            )
            self.conversation_list.select(conversation.id)
        else:
            self.refresh_conversations()
        self._update_buttons()

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
                hint = (
                    "Attach still frames from it as images"
                    if kind == VIDEO
                    else "Load a package whose model takes it"
                )
                show_error(
                    self, {"message": f"{Path(f).name} was not attached: {refusal}", "hint": hint}
                )
                continue
            self.strip.add(Path(f), kind)

    def _refusal(self, kind: str) -> str | None:
        """Why the loaded package cannot take this kind of attachment (None: it can)."""
        if kind == VIDEO:
            return NO_VIDEO  # whatever the model: the runtime has no video input
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

    def _system(self) -> str | None:
        """The system prompt in the box; None when the open conversation already has it."""
        text = self.system.toPlainText().strip()
        held = self.conversation.system if self.conversation is not None else ""
        return None if text == held else text

    def _ready(self) -> bool:
        return self._loaded and not self._busy and not self.local

    @Slot()
    def send(self) -> None:
        """Send the draft (or the edited last message)."""
        text = self.input.toPlainText().strip()
        files = list(self.strip.files)
        if not self._ready() or (not text and not files):
            return
        self._draft = (text, files)
        self.input.clear()
        self.strip.set_files([])
        options = self.settings_box.options()
        if self._editing:
            self._editing = False
            last = last_user(messages_of(self.conversation))
            kept = [(a.path, a.kind) for a in last.attachments] if last is not None else []
            self._begin_turn(tail_from_last_user(messages_of(self.conversation)), text, kept)
            self.bridge.edit_last(text, options, self._system())
        else:
            self._begin_turn(0, text, files)
            self.bridge.send(text, files, options, self._system())

    def _begin_turn(self, replaces: int, text: str | None, files: list[tuple[Path, str]]) -> None:
        from mmforge.backend.attachments import Attachment

        user = None
        if text is not None:
            shown = [Attachment(kind=k, path=p, name=p.name) for p, k in files]
            user = Message(role="user", text=text, attachments=shown)
        self.pending = Pending(replaces=replaces, user=user)
        self._tokens, self._first_token_at = 0, 0.0
        self.status.setText("Reading the prompt…")
        self._render(streaming=True)
        self._ensure_listed()

    @Slot()
    def regenerate(self) -> None:
        """Answer the last message again."""
        messages = messages_of(self.conversation)
        if not self._ready() or not messages:
            return
        self._draft = None
        self._begin_turn(1 if messages[-1].role == "assistant" else 0, None, [])
        self.bridge.regenerate(self.settings_box.options(), self._system())

    @Slot()
    def edit_last(self) -> None:
        """Put the last user message back in the input for editing."""
        last = last_user(messages_of(self.conversation))
        if last is None or not self._ready():
            return
        self.input.setPlainText(last.text)
        self._editing = True
        self.input.setFocus()

    @Slot()
    def stop(self) -> None:
        """Stop the answer being streamed (Stop, Esc)."""
        if self._busy:
            self.bridge.stop()

    @Slot(str)
    def _on_token(self, text: str) -> None:
        # Streaming costs one text insertion per token, inside the open answer's bubble;
        # the Markdown render of the whole answer happens once, when it ends (re-rendering
        # per token stalled the window).
        if self.pending is None:
            return
        if not self._tokens:
            self._first_token_at = time.perf_counter()
        self._tokens += 1
        self.pending.answer += text
        if self._stream_cursor is not None:
            shown = self._stream_shown.feed(text)  # long lines broken, a bounded length
            if shown:
                self._stream_cursor.insertText(shown)
        if not self._render_timer.isActive():
            self._render_timer.start()

    def _show_progress(self) -> None:
        """The live line under the transcript: tokens so far and their rate."""
        if self.pending is None or not self._tokens:
            return
        elapsed = time.perf_counter() - self._first_token_at
        rate = f" · {(self._tokens - 1) / elapsed:.1f} tokens/s" if elapsed > 0.2 else ""
        self.status.setText(f"Generating… {self._tokens} tokens{rate}")

    @Slot(object)
    def _on_turn(self, turn: TurnResult) -> None:
        # The worker reported the conversation this turn made just before (it is drawn).
        self._draft = None

    @Slot(dict)
    def _on_failed(self, error: dict[str, Any]) -> None:
        self.status.setText("")
        self.pending = None
        if self._draft is not None:
            # Nothing is lost: the message and its attachments go back into the draft.
            text, files = self._draft
            self.input.setPlainText(text)
            self.strip.set_files(files)
            self._draft = None
            self._render()
        if not self._loaded:
            self.info.setText(for_display(f"Not loaded: {error.get('message')}", 2000))
            self.load_button.setEnabled(True)
        show_error(self, error)

    @Slot(bool)
    def _on_busy(self, busy: bool) -> None:
        self._busy = busy
        self._update_buttons()

    def _update_buttons(self) -> None:
        ready = self._ready()
        messages = messages_of(self.conversation)
        self.send_button.setEnabled(ready)
        self.regen_button.setEnabled(ready and bool(messages))
        self.edit_button.setEnabled(ready and last_user(messages) is not None)
        self.stop_button.setEnabled(self._loaded and self._busy)
        shown = self.conversation is not None and not self._busy
        self.conversation_list.set_enabled(
            manage=shown and bool(messages or (self.conversation and self.conversation.title)),
            new=not self._busy,
            export=shown and bool(messages),
        )
        self._update_continue()

    def _update_continue(self) -> None:
        """Under a conversation the loaded model does not hold: load its own to continue."""
        c = self.conversation
        if c is None or not self.local or not c.messages or self._busy:
            self.continue_bar.setVisible(False)
            return
        name = Path(c.package).name
        if not (Path(c.package) / "genai_config.json").is_file():
            self.continue_note.setText(
                f"Made with {name}, which is no longer there: read, rename, export or delete it."
            )
            self.continue_button.setVisible(False)
        else:
            loading = not self.load_button.isEnabled()
            self.continue_note.setText(f"Made with {name}. Load it to go on with it.")
            self.continue_button.setText(f"Load {name} to continue")
            self.continue_button.setEnabled(not loading)
            self.continue_button.setVisible(True)
        self.continue_bar.setVisible(True)

    @Slot()
    def _scroll_to_end(self) -> None:
        bar = self.transcript.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _render(self, streaming: bool = False) -> None:
        """Redraw the transcript.

        While `streaming`, the answer in flight is an open bubble whose text grows as
        tokens arrive (see `_on_token`).
        """
        pending = self.pending
        messages = shown_messages(self.conversation, pending)
        forgotten = self.conversation.forgotten if self.conversation is not None else 0
        c = colours(self.palette())
        self.transcript.document().setDefaultStyleSheet(stylesheet(c))
        thumb = self.transcript.thumb_url
        parts = []
        if self.conversation is not None and self.conversation.continues:
            parts.append(continued_html(c))
        if self.conversation is not None and self.conversation.summary:
            parts.append(summary_html(self.conversation.summary, c))
        for i, m in enumerate(messages):
            if i == forgotten and i > 0:
                parts.append(forgotten_html(c))
            parts.append(message_html(m, i, c, thumb))
        if not messages and pending is None:
            parts.append(empty_html(self._loaded, c))
        if pending is not None:
            if streaming:
                head = f"<p style='color:{c.muted};font-size:small'>Model</p>"
                from mmforge.gui.transcript import bubble

                parts.append(bubble(f"{head}<p>{MARK}</p>", c, user=False))
            else:
                parts.append(message_html(Message("assistant", pending.answer), None, c, thumb))
        self._shown = messages
        self.transcript.setHtml("".join(parts))
        self._stream_cursor = None
        if pending is not None and streaming:
            found = self.transcript.document().find(MARK)
            if not found.isNull():
                found.removeSelectedText()
                self._stream_shown = StreamBreaker()
                found.insertText(self._stream_shown.feed(pending.answer))  # keeps what came
                self._stream_cursor = found
        self._scroll_to_end()

    def changeEvent(self, event: QEvent) -> None:
        """Redraw the transcript in the new colours when the palette changes."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "_shown"):
            self._render(streaming=self.pending is not None)

    @Slot(QUrl)
    def _on_anchor(self, url: QUrl) -> None:
        """Copy links (a message, a code block); web links open in the browser."""
        if url.scheme() in ("http", "https"):
            QDesktopServices.openUrl(url)
            return
        parts = url.toString().split(":")
        if parts[0] == "continues" and self.conversation is not None:
            if self.conversation.continues:
                self.open_conversation(self.conversation.continues)
            return
        try:
            message = self._shown[int(parts[1])]
            text = message.text if parts[0] == "copy" else code_blocks(message.text)[int(parts[2])]
        except (IndexError, ValueError):
            return
        QApplication.clipboard().setText(text)
        self.status.setText("Copied to the clipboard.")

    @Slot()
    def copy_last_answer(self) -> None:
        """Put the last answer on the clipboard."""
        messages = messages_of(self.conversation)
        last = next((m for m in reversed(messages) if m.role == "assistant"), None)
        if last is not None:
            QApplication.clipboard().setText(last.text)
            self.status.setText("Copied the last answer to the clipboard.")

    def shutdown(self) -> None:
        """Close the worker (on window close)."""
        self.eps.shutdown()
        self.bridge.close()
        self._scratch.cleanup()


def _written_at(package: Path) -> int | None:
    """When a package was last written (its genai_config.json), to see it converted again."""
    try:
        return (package / "genai_config.json").stat().st_mtime_ns
    except OSError:
        return None
