"""Chat page: conversations with a package, streamed answers, attachments, Stop."""

from __future__ import annotations

import html
import json
import secrets
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, Qt, QTimer, QUrl, Slot
from PySide6.QtGui import QDesktopServices, QImage, QImageReader, QTextCursor, QTextDocument
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend.attachments import AUDIO, IMAGE, kind_of
from mmforge.backend.chat.conversations import (
    Conversation,
    ConversationStore,
    Message,
    short_title,
)
from mmforge.backend.chat.values import SessionInfo, TurnResult
from mmforge.gui.bridge import ChatBridge, JobRunner
from mmforge.gui.chat_input import AttachmentStrip, ChatInput
from mmforge.gui.errors import show_error
from mmforge.gui.markdown import code_blocks, plain, to_html
from mmforge.gui.safe_text import (
    SafeBrowser,
    StreamBreaker,
    as_html,
    for_display,
    is_regular_file,
    plain_label,
    refused,
)
from mmforge.gui.state import AppState
from mmforge.gui.theme import Colours, colours, stylesheet

STOPS = {"eos": "end of answer", "length": "token limit", "stopped": "stopped"}
THUMB = 200  # the longest side of an image in the transcript, in pixels
MARK = "\u2063"  # an invisible separator: where streamed tokens go in the open answer


class Transcript(SafeBrowser):
    """The conversation as a document; pictures are drawn from scaled copies.

    The view registers each picture it draws (`thumb_url`) and writes it as
    `<img src="thumb:<secret>-N">`: the browser asks `loadResource` for it, which scales the file
    once and keeps the result, so a redraw never decodes a full-size photo again. Any
    other resource (an image or a `thumb:` URL an answer or a saved conversation names)
    is refused and never read.
    """

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._thumbs: dict[str, QImage] = {}
        self._urls: dict[Path, str] = {}
        self._paths: dict[str, Path] = {}
        # Not guessable: an answer that writes `thumb:...` draws none of these pictures.
        self._secret = secrets.token_hex(8)
        self.setOpenLinks(False)

    def thumb_url(self, path: Path) -> str:
        """The URL the transcript draws the picture `path` by (it may load that file)."""
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = f"thumb:{self._secret}-{len(self._urls)}"
            self._paths[url] = path
        return url

    def loadResource(self, kind: int, url: QUrl | str) -> Any:
        """The registered thumbnails; nothing else (see `safe_text.refused`)."""
        key = QUrl(url).toString()
        path = self._paths.get(key)
        if kind != QTextDocument.ResourceType.ImageResource.value or path is None:
            return refused()
        if key not in self._thumbs:
            self._thumbs[key] = _thumbnail(path)
        return self._thumbs[key]


def _thumbnail(path: Path) -> QImage:
    """The picture scaled to fit THUMB; an empty image for anything but a readable file."""
    if not is_regular_file(path):  # a FIFO or a device named in a saved conversation
        return QImage()
    reader = QImageReader(str(path))
    size = reader.size()
    if size.isValid() and max(size.width(), size.height()) > THUMB:
        reader.setScaledSize(size.scaled(THUMB, THUMB, Qt.AspectRatioMode.KeepAspectRatio))
    image = reader.read()
    return image if not image.isNull() else QImage()


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
        self._stream_cursor: QTextCursor | None = None
        self._stream_shown = StreamBreaker()
        self._shown: list[Message] = []
        self._tokens, self._first_token_at = 0, 0.0
        self._render_timer = QTimer(self, singleShot=True, interval=100)
        self._render_timer.timeout.connect(self._scroll_to_end)
        self._render_timer.timeout.connect(self._show_progress)
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
        self._render()

    def _package_row(self) -> QHBoxLayout:
        """Package, library, Choose…, provider, Load (and the info line below them)."""
        self.package = QLineEdit(self.state.package)
        self.package.setAccessibleName("Package folder")
        self.library = QComboBox()
        self.library.setObjectName("library")
        self.library.setToolTip("Converted packages in the package folder")
        self.library.activated.connect(self._pick_library)
        choose = QPushButton("Choose…")
        choose.clicked.connect(self.choose_package)
        self.ep = QComboBox()
        self.ep.addItems(["cpu", "cuda"])
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

    def _conversation_list(self) -> QVBoxLayout:
        """The saved conversations, New, Rename, Delete and Export."""
        self.conversations = QListWidget()
        self.conversations.setObjectName("conversations")
        self.conversations.setAccessibleName("Conversations")
        self.conversations.setMaximumWidth(240)
        self.conversations.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.conversations.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.conversations.itemClicked.connect(self._open)
        self.conversations.itemDoubleClicked.connect(self._rename)
        self.new_button = QPushButton("New")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.new_conversation)
        self.rename_button = QPushButton("Rename…")
        self.rename_button.setToolTip("Give the selected conversation a title (or double-click)")
        self.rename_button.clicked.connect(self._rename)
        self.delete_button = QPushButton("Delete…")
        self.delete_button.setToolTip("Delete the selected conversation (with a package loaded)")
        self.delete_button.clicked.connect(self._delete)
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("Save the open conversation as Markdown or JSON")
        self.export_button.clicked.connect(self._export)
        side = QVBoxLayout()
        side.addWidget(QLabel("Conversations"))
        side.addWidget(self.conversations, 1)
        pairs = ((self.new_button, self.rename_button), (self.delete_button, self.export_button))
        for pair in pairs:
            row = QHBoxLayout()
            for button in pair:
                row.addWidget(button)
            side.addLayout(row)
        return side

    def _chat_column(self) -> QVBoxLayout:
        """The transcript, the draft with its attachments, and the turn buttons."""
        self.transcript = Transcript()
        self.transcript.setObjectName("transcript")
        self.transcript.setAccessibleName("Conversation")
        self.transcript.anchorClicked.connect(self._on_anchor)
        self.status = plain_label()
        self.status.setObjectName("chatStatus")
        self.strip = AttachmentStrip()
        self.input = ChatInput()
        self.input.setObjectName("chatInput")
        self.input.setAccessibleName("Message")
        self.input.setPlaceholderText(
            "Type a message. Enter sends, Shift+Enter starts a new line; paste or drop "
            "an image to attach it."
        )
        self.input.send_requested.connect(self.send)
        self.input.stop_requested.connect(self.bridge.stop)
        self.input.files_added.connect(self._add_files)
        self.input.image_pasted.connect(self._add_image)
        centre = QVBoxLayout()
        centre.addWidget(self.transcript, 1)
        centre.addWidget(self.status)
        self.settings_box = self._settings_box()
        centre.addWidget(self.settings_box)
        centre.addWidget(self.strip)
        centre.addWidget(self.input)
        centre.addLayout(self._turn_buttons())
        return centre

    def _settings_box(self) -> QGroupBox:
        """System prompt and how tokens are picked (hidden until Settings is pressed)."""
        box = QGroupBox("Answer settings")
        box.setObjectName("chatSettings")
        self.system = QPlainTextEdit()
        self.system.setObjectName("systemPrompt")
        self.system.setAccessibleName("System prompt")
        self.system.setPlaceholderText(
            "Optional: instructions the model reads before the conversation (this "
            "conversation's own; saved with it)"
        )
        self.system.setTabChangesFocus(True)
        self.system.setMaximumHeight(64)
        self.sample = QCheckBox("Sample (otherwise the most likely token, every time)")
        self.sample.setChecked(self.state.text("chat/sample", "false") == "true")
        self.temperature = QDoubleSpinBox(minimum=0.05, maximum=2.0, singleStep=0.05)
        self.temperature.setValue(self.state.number("chat/temperature", 0.7))
        self.top_p = QDoubleSpinBox(minimum=0.05, maximum=1.0, singleStep=0.05)
        self.top_p.setValue(self.state.number("chat/top_p", 0.95))
        self.top_k = QSpinBox(minimum=1, maximum=1000)
        self.top_k.setValue(self.state.number("chat/top_k", 50))
        self.seed = QSpinBox(minimum=-1, maximum=2**31 - 1)
        self.seed.setSpecialValueText("random")
        self.seed.setValue(self.state.number("chat/seed", -1))
        self.max_tokens = QSpinBox(minimum=1, maximum=8192)
        self.max_tokens.setValue(self.state.number("chat/max_tokens", 256))
        self.max_tokens.setToolTip("Most tokens per answer")
        self.max_tokens.setMaximumWidth(120)
        sampling = QHBoxLayout()
        for label, widget in (
            ("temperature", self.temperature),
            ("top-p", self.top_p),
            ("top-k", self.top_k),
            ("seed", self.seed),
        ):
            widget.setAccessibleName(label)
            sampling.addWidget(QLabel(label))
            sampling.addWidget(widget)
        sampling.addStretch(1)
        self.sample.toggled.connect(self._sampling_changed)
        self._sampling_widgets = (self.temperature, self.top_p, self.top_k, self.seed)
        self._sampling_changed(self.sample.isChecked())
        form = QFormLayout(box)
        form.addRow("System prompt", self.system)
        form.addRow(self.sample)
        form.addRow("", sampling)
        form.addRow("Longest answer (tokens)", self.max_tokens)
        box.setVisible(False)
        return box

    @Slot(bool)
    def _sampling_changed(self, on: bool) -> None:
        for widget in self._sampling_widgets:
            widget.setEnabled(on)

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
        self.stop_button.clicked.connect(self.bridge.stop)
        self.regen_button = QPushButton("Regenerate")
        self.regen_button.setToolTip("Answer the last message again")
        self.regen_button.clicked.connect(self.regenerate)
        self.edit_button = QPushButton("Edit last")
        self.edit_button.setToolTip("Put your last message back in the box to change it")
        self.edit_button.clicked.connect(self.edit_last)
        self.settings_button = QPushButton("Settings")
        self.settings_button.setCheckable(True)
        self.settings_button.setToolTip("System prompt, sampling and answer length")
        self.settings_button.toggled.connect(self._settings_toggled)
        buttons = QHBoxLayout()
        for w in (attach, self.regen_button, self.edit_button, self.settings_button):
            buttons.addWidget(w)
        buttons.addStretch(1)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.send_button)
        return buttons

    @Slot(bool)
    def _settings_toggled(self, shown: bool) -> None:
        self.settings_box.setVisible(shown)

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
                "\nThis is the random-weight demo model: it talks nonsense by design, "
                "while its parity with the original is exact."
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
    def choose_package(self) -> None:
        """Pick a package folder and load it."""
        folder = QFileDialog.getExistingDirectory(self, "Package folder")
        if folder:
            self.package.setText(folder)
            self.load()

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
            item.setToolTip(as_html(f"{s.title}\n{s.messages} messages with {s.package}"))
            self.conversations.addItem(item)
        self._ensure_listed()

    def _ensure_listed(self) -> None:
        """List the open conversation even before the worker first saves it."""
        conversation = self.conversation
        if conversation is None:
            return
        item = self._list_item(conversation.id)
        pending = self.pending.user if self.pending is not None else None
        title = conversation.title or short_title(pending.text if pending else "")
        title = title or "New conversation"
        if item is None:
            item = QListWidgetItem(title)
            item.setData(Qt.ItemDataRole.UserRole, conversation.id)
            self.conversations.insertItem(0, item)
        elif item.text() != title and (conversation.title or pending):
            item.setText(title)
        self._select_open()

    @Slot()
    def new_conversation(self) -> None:
        """Start an empty conversation (listed at once)."""
        if self._loaded and not self._busy:
            self.bridge.new_conversation()

    @Slot()
    def _rename(self, item: QListWidgetItem | None = None) -> None:
        item = item if isinstance(item, QListWidgetItem) else self.conversations.currentItem()
        if item is None or not self._loaded or self._busy:
            return
        title, ok = QInputDialog.getText(self, "Rename conversation", "Title", text=item.text())
        if ok and title.strip():
            self.bridge.rename_conversation(str(item.data(Qt.ItemDataRole.UserRole)), title)

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
            as_html(f"Delete “{item.text()}” and its attachments? This cannot be undone."),
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
        self.status.setText("")
        # A saved conversation shows its own system prompt; a new, empty one keeps what the
        # box holds, to be applied with its first message.
        held = conversation.messages or conversation.system
        if held and self.system.toPlainText().strip() != conversation.system:
            self.system.setPlainText(conversation.system)
        self._render()
        # Reading every saved conversation is disk work on the GUI thread: after a turn of
        # a conversation already listed, update its entry only.
        listed = self._list_item(conversation.id)
        if after_turn and listed is not None:
            listed.setToolTip(
                as_html(f"{len(conversation.messages)} messages with {conversation.package}")
            )
            listed.setText(conversation.title or listed.text())
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
        """The generation options the settings say (remembered for the next run)."""
        saved = self.state.settings
        values = {
            "sample": "true" if self.sample.isChecked() else "false",
            "temperature": self.temperature.value(),
            "top_p": self.top_p.value(),
            "top_k": self.top_k.value(),
            "seed": self.seed.value(),
            "max_tokens": self.max_tokens.value(),
        }
        for key, value in values.items():
            saved.setValue(f"chat/{key}", value)
        options: dict[str, Any] = {"max_new_tokens": self.max_tokens.value()}
        if self.sample.isChecked():
            options.update(
                do_sample=True,
                temperature=self.temperature.value(),
                top_p=self.top_p.value(),
                top_k=self.top_k.value(),
                seed=None if self.seed.value() < 0 else self.seed.value(),
            )
        return options

    def _system(self) -> str | None:
        """The system prompt in the box; None when the open conversation already has it."""
        text = self.system.toPlainText().strip()
        held = self.conversation.system if self.conversation is not None else ""
        return None if text == held else text

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
        if self._editing:
            self._editing = False
            last = next((m for m in reversed(self._messages()) if m.role == "user"), None)
            kept = [(a.path, a.kind) for a in last.attachments] if last is not None else []
            self._begin_turn(self._tail_from_last_user(), text, kept)
            self.bridge.edit_last(text, self._options(), self._system())
        else:
            self._begin_turn(0, text, files)
            self.bridge.send(text, files, self._options(), self._system())

    def _messages(self) -> list[Message]:
        return self.conversation.messages if self.conversation is not None else []

    def _tail_from_last_user(self) -> int:
        """How many messages the last user message and what follows it make."""
        messages = self._messages()
        for back, m in enumerate(reversed(messages), start=1):
            if m.role == "user":
                return back
        return 0

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
        messages = self._messages()
        if not self._loaded or self._busy or not messages:
            return
        self._draft = None
        self._begin_turn(1 if messages[-1].role == "assistant" else 0, None, [])
        self.bridge.regenerate(self._options(), self._system())

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
        ready = self._loaded and not self._busy
        for b in (
            self.send_button,
            self.regen_button,
            self.edit_button,
            self.delete_button,
            self.rename_button,
            self.new_button,
        ):
            b.setEnabled(ready)
        self.stop_button.setEnabled(self._loaded and self._busy)

    @Slot()
    def _scroll_to_end(self) -> None:
        bar = self.transcript.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _render(self, streaming: bool = False) -> None:
        """Redraw the transcript.

        While `streaming`, the answer in flight is an open bubble whose text grows as
        tokens arrive (see `_on_token`).
        """
        messages = list(self._messages())
        pending = self.pending
        if pending is not None:
            messages = messages[: len(messages) - pending.replaces]
            if pending.user is not None:
                messages.append(pending.user)
        c = colours(self.palette())
        self.transcript.document().setDefaultStyleSheet(stylesheet(c))
        thumb = self.transcript.thumb_url
        parts = [_message_html(m, i, c, thumb) for i, m in enumerate(messages)]
        if not parts and pending is None:
            parts.append(_empty_html(self._loaded, c))
        if pending is not None:
            if streaming:
                head = f"<p style='color:{c.muted};font-size:small'>Model</p>"
                parts.append(_bubble(f"{head}<p>{MARK}</p>", c, user=False))
            else:
                parts.append(_message_html(Message("assistant", pending.answer), None, c, thumb))
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
        last = next((m for m in reversed(self._messages()) if m.role == "assistant"), None)
        if last is not None:
            QApplication.clipboard().setText(last.text)
            self.status.setText("Copied the last answer to the clipboard.")

    def shutdown(self) -> None:
        """Close the worker (on window close)."""
        self.eps.shutdown()
        self.bridge.close()
        self._scratch.cleanup()


def _empty_html(loaded: bool, c: Colours) -> str:
    """What an empty transcript says: the next step."""
    if loaded:
        text = (
            "Ask something below and press Enter. To show the model a picture, use "
            "Attach…, drag it here, or paste it with Ctrl+V."
        )
    else:
        text = (
            "Choose a package to chat with: pick one from the Library list above, or "
            "Choose… a folder, then press Load. Convert a model first if you have none."
        )
    return f"<p style='color:{c.muted}'>{text}</p>"


def _bubble(body: str, c: Colours, *, user: bool) -> str:
    """A message drawn as a bubble: the user's on the right, the model's on the left."""
    colour = c.user_bubble if user else c.model_bubble
    cell = f"<td bgcolor='{colour}'>{body}</td>"
    gap = "<td width='15%'></td>"
    row = gap + cell if user else cell + gap
    return (
        "<table width='100%' cellspacing='0' cellpadding='10' style='margin-bottom:10px'>"
        f"<tr>{row}</tr></table>"
    )


def _message_html(
    m: Message, index: int | None, c: Colours, thumb: Callable[[Path], str] | None = None
) -> str:
    """One message of the transcript; `index` names it in its Copy links (None: none).

    `thumb` gives the URL a picture attachment is drawn by (None: pictures are not drawn).
    Text is cut and its long lines broken for display (`safe_text.for_display`); the
    message itself, and what Copy copies, stay whole.
    """
    muted = f"color:{c.muted};font-size:small"
    copy = f" · <a href='copy:{index}'>Copy</a>" if index is not None and m.text.strip() else ""
    if m.role == "user":
        pictures = "".join(
            f"<img src='{html.escape(thumb(a.path))}'> "
            for a in m.attachments
            if a.kind == IMAGE and thumb is not None
        )
        chips = "".join(
            f"<span style='background:{c.chip}'>&nbsp;♪ {html.escape(a.name)}&nbsp;</span> "
            for a in m.attachments
            if a.kind != IMAGE
        )
        head = f"<p style='{muted}'>You{copy}</p>"
        shown = f"<p>{pictures}</p>" if pictures else ""
        shown += f"<p>{chips}</p>" if chips else ""
        return _bubble(head + shown + plain(for_display(m.text)), c, user=True)
    links = None if index is None else (lambda k: f"code:{index}:{k}")
    body = (
        to_html(for_display(m.text), style=c.pygments, border=c.border, code_link=links)
        if m.text
        else "<p><i>(no text)</i></p>"
    )
    stats = m.stats
    line = ""
    if stats:
        # How the answer ended, in words; an answer saved before that was recorded says
        # nothing rather than the engine's internal word for how it read the prompt.
        ended = STOPS.get(m.stop_reason)
        line = (
            f"{stats.get('new_tokens')} tokens · first after "
            f"{stats.get('time_to_first_token_s', 0):.2f} s · "
            f"{stats.get('decode_tokens_per_s', 0):.1f} tokens/s" + (f" · {ended}" if ended else "")
        )
    head = f"<p style='{muted}'>Model{copy}</p>"
    foot = f"<p style='{muted}'>{line}</p>" if line else ""
    return _bubble(head + body + foot, c, user=False)
