"""Chat page: conversations with a package, streamed answers, attachments, Stop.

`ChatView` is the page: the draft, attachments and the turn in flight. Its other parts
live beside it: `chat_loading` (Load and the worker's life), `chat_conversations` (the
list, opening, renaming, deleting and exporting saved ones, with no model needed),
`package_bar` (the Package row), `serve_bar` (Serve on this computer), `chat_column`
(the centre column's widgets), `chat_render` (drawing the transcript, streaming in),
`chat_attachments`, `chat_export`, and the widgets `transcript`, `conversation_list`,
`chat_settings` and `chat_input`; `chat_turns` holds the turn state, without widgets.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, Qt, QTimer, QUrl, Slot
from PySide6.QtGui import QDesktopServices, QImage, QKeySequence, QShortcut, QTextCursor
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend.attachments import kind_of
from mmforge.backend.chat.conversations import ConversationStore, Message
from mmforge.backend.chat.values import TurnResult
from mmforge.gui.bridge import ChatBridge, JobRunner
from mmforge.gui.chat_attachments import (
    attachment_problem,
    pick_files,
    refusal,
    refusal_hint,
    save_pasted,
)
from mmforge.gui.chat_column import ChatColumn
from mmforge.gui.chat_conversations import ChatConversations
from mmforge.gui.chat_drafts import DraftKeeper
from mmforge.gui.chat_loading import ChatLoading
from mmforge.gui.chat_page import ChatPage
from mmforge.gui.chat_render import TranscriptWriter
from mmforge.gui.chat_settings import ChatSettings
from mmforge.gui.chat_turns import (
    Pending,
    is_demo,
    last_user,
    messages_of,
    tail_from_last_user,
)
from mmforge.gui.conversation_list import ConversationList
from mmforge.gui.errors import show_error
from mmforge.gui.package_bar import PackageBar
from mmforge.gui.serve_bar import ServeBar
from mmforge.gui.state import AppState

SHOW_EVERY_S = 0.1  # how often streamed text reaches the window


def _page_field(name: str) -> Any:
    """A ChatView attribute that is the page state's field `name`."""
    return property(
        lambda view: getattr(view.page, name),
        lambda view, value: setattr(view.page, name, value),
    )


__all__ = ["ChatView", "is_demo"]


class ChatView(ChatLoading, ChatConversations, QWidget):
    """Talk to a package; the session runs in a worker process."""

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.store = ConversationStore()  # read here; the worker writes the one it holds
        self.bridge = ChatBridge(self)
        self.eps = JobRunner(self)
        self.package_bar = bar = PackageBar(state)
        # The row's parts, by the names the window and the tests use.
        self.package, self.library, self.ep = bar.package, bar.library, bar.ep
        self.load_button, self.info = bar.load_button, bar.info
        self.refresh_library, self.choose_package = bar.refresh_library, bar.choose_package
        self.conversation_list = ConversationList()
        self.conversations = self.conversation_list.items
        self.settings_box = ChatSettings(state)
        self.settings_box.setVisible(False)
        body = QHBoxLayout()
        body.addWidget(self.conversation_list)
        body.addWidget(self._chat_column(), 1)
        # Serve on this computer: the package to other apps (its own process and model).
        self.serve_bar = ServeBar(lambda: (self.package.text().strip(), self.ep.currentText()))
        layout = QVBoxLayout(self)
        layout.addWidget(bar)
        layout.addWidget(self.serve_bar)
        layout.addLayout(body, 1)
        # Attachment copies are checked against the store read now (the self-test swaps it).
        self.writer = TranscriptWriter(self.transcript, lambda c: self.store.copy_folders(c))
        # What the page shows and allows: one Qt-free object (gui/chat_page.py). The
        # conversation is what the worker last reported (or what was read from disk), and
        # the turn in flight: no copy of our own.
        self.page = ChatPage()
        self._draft: tuple[str, list[tuple[Path, str]]] | None = None
        self._loaded_written: int | None = None  # when the loaded package was written
        self._tokens, self._first_token_at = 0, 0.0
        # Streamed text waits here and is shown every SHOW_EVERY_S, in one piece: shown
        # token by token, a fast answer queued thousands of insertions and the window
        # froze at "164 tokens", then jumped to 3,936.
        self._unshown, self._shown_at = "", 0.0
        self._render_timer = QTimer(self, singleShot=True, interval=int(SHOW_EVERY_S * 1000))
        self._render_timer.timeout.connect(self._show_stream)
        self._connect()
        self.refresh_conversations()
        self.refresh_library()
        self.eps.start("eps", {})
        self.page.subscribe(self._update_buttons)
        self._update_buttons()
        self._render()
        # The unsent message of each conversation, on disk until sent (gui/chat_drafts.py).
        self.drafts = DraftKeeper(self)

    # The page's state, by the names the mixins and the tests use (`self.page` holds it).
    conversation = _page_field("conversation")
    local = _page_field("local")
    pending = _page_field("pending")
    session_info = _page_field("session")
    _loaded = _page_field("loaded")
    _busy = _page_field("busy")
    _editing = _page_field("editing")

    def _connect(self) -> None:
        bar = self.package_bar
        bar.load_requested.connect(self.load)
        bar.unload_requested.connect(self.unload)
        self.bridge.ready.connect(self._on_ready)
        self.bridge.token.connect(self._on_token)
        self.bridge.note.connect(self.status.setText)
        self.bridge.turn.connect(self._on_turn)
        self.bridge.failed.connect(self._on_failed)
        self.bridge.conversation.connect(self._on_conversation)
        self.bridge.busy.connect(self._on_busy)
        self.bridge.closed.connect(self._on_closed)
        self.eps.succeeded.connect(bar.set_eps)
        self.state.package_changed.connect(self._package_changed)
        self.state.package_changed.connect(self.refresh_library)
        self.package.textChanged.connect(self._package_named)
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

    def _chat_column(self) -> ChatColumn:
        """The transcript, the continue bar, the draft and the turn buttons, connected."""
        column = ChatColumn(self.settings_box)
        # Its parts, by the names the window and the tests use.
        self.transcript, self.status, self.strip = column.transcript, column.status, column.strip
        self.input, self.continue_bar = column.input, column.continue_bar
        self.continue_note, self.continue_button = column.continue_note, column.continue_button
        self.send_button, self.stop_button = column.send_button, column.stop_button
        self.regen_button, self.edit_button = column.regen_button, column.edit_button
        self.settings_button = column.settings_button
        self.transcript.anchorClicked.connect(self._on_anchor)
        self.transcript.files_dropped.connect(self._add_files)
        self.continue_button.clicked.connect(self.continue_open)
        self.input.send_requested.connect(self.send)
        self.input.stop_requested.connect(self.stop)
        self.input.files_added.connect(self._add_files)
        self.input.image_pasted.connect(self._add_image)
        column.attach_button.clicked.connect(self._pick)
        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(self.stop)
        self.regen_button.clicked.connect(self.regenerate)
        self.edit_button.clicked.connect(self.edit_last)
        return column

    # -- attachments ---------------------------------------------------------------------

    @Slot()
    def _pick(self) -> None:
        info = self.session_info
        sound = info.audio if info is not None else True  # not loaded: all it could take
        picked = pick_files(self, self.state.text("chat/attach_folder", ""), sound=sound)
        if picked:
            self.state.settings.setValue("chat/attach_folder", str(Path(picked[0]).parent))
        self._add_files(picked)
        # Back to the message: left on Attach…, the first space typed reopened the dialog.
        self.input.setFocus(Qt.FocusReason.OtherFocusReason)

    @Slot(list)
    def _add_files(self, files: list[str]) -> None:
        for f in files:
            kind = kind_of(Path(f))
            why = refusal(self.session_info, kind)
            if why is not None:  # said now, not at Send; the draft stays as it is
                message = f"{Path(f).name} was not attached: {why}."
                show_error(self, {"message": message, "hint": refusal_hint(kind)})
                continue
            if attachment_problem(self, Path(f), kind):
                continue
            self.strip.add(Path(f), kind)

    @Slot(QImage)
    def _add_image(self, image: QImage) -> None:
        path = self.drafts.store.pasted_file()  # kept with the draft across a restart
        if not save_pasted(image, path):
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
        return self.page.ready

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
            self._begin_turn(tail_from_last_user(messages_of(self.conversation)), text, files)
            # The strip held the old message's attachments to keep or remove (or add to).
            changed = None if files == kept else files
            self.bridge.edit_last(text, options, self._system(), changed)
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
        self.bridge.regenerate(self.settings_box.another_answer(), self._system())

    @Slot()
    def edit_last(self) -> None:
        """Put the last user message back in the input for editing.

        The message and its answer leave the transcript while it is edited (the edit
        replaces them); Esc puts them back.
        """
        last = last_user(messages_of(self.conversation))
        if last is None or not self._ready():
            return
        self.input.setPlainText(last.text)
        self.input.moveCursor(QTextCursor.MoveOperation.End)
        # Its attachments wait in the strip, to be kept, removed or added to.
        self.strip.set_files([(a.path, a.kind) for a in last.attachments])
        self._editing = True
        self._render()
        self.status.setText("Editing your last message: Enter sends it, Esc cancels.")
        self.input.setFocus()

    def cancel_edit(self) -> None:
        """Leave Edit last: the message and its answer come back, the input empties."""
        if not self._editing:
            return
        self._editing = False
        self.input.clear()
        self.strip.set_files([])
        self.status.setText("")
        self._render()

    @Slot()
    def unload(self) -> None:
        """Let the model go (its memory is freed); the conversation stays shown, saved."""
        if not self._loaded or self._busy:
            return
        self.cancel_edit()
        name = Path(self.session_info.package).name if self.session_info else "The model"
        self.package_bar.unload_button.setEnabled(False)
        self.bridge.unload()
        self.package_bar.say(f"{name} is unloaded; press Load to chat with it again.")

    @Slot()
    def stop(self) -> None:
        """Stop the answer being streamed (Stop, Esc); Esc also leaves Edit last."""
        if self._busy:
            self.bridge.stop()
        else:
            self.cancel_edit()

    @Slot(str)
    def _on_token(self, text: str) -> None:
        if self.pending is None:
            return
        if not self._tokens:
            self._first_token_at = time.perf_counter()
        self._tokens += 1
        self.pending.answer += text
        self._unshown += text
        if time.perf_counter() - self._shown_at >= SHOW_EVERY_S:
            self._show_stream()  # tokens keep coming: a timer could wait behind them
        elif not self._render_timer.isActive():
            self._render_timer.start()

    def _show_stream(self) -> None:
        """Show the streamed text that waits, the live line, and the end of the transcript."""
        if self.pending is None:
            return
        if self._unshown:
            self.writer.stream(self._unshown)
            self._unshown = ""
        self._shown_at = time.perf_counter()
        self.writer.scroll_to_end()
        self._show_progress()

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
            self.package_bar.say(f"Not loaded: {error.get('message')}")
            self.load_button.setEnabled(True)
        show_error(self, error)

    @Slot(bool)
    def _on_busy(self, busy: bool) -> None:
        self._busy = busy
        self._update_buttons()

    def _update_buttons(self) -> None:
        """Each control enabled as the page's state allows (`ChatPage.allowed`)."""
        allowed = self.page.allowed()
        self.send_button.setEnabled(allowed.send)
        self.regen_button.setEnabled(allowed.regenerate)
        self.edit_button.setEnabled(allowed.edit)
        self.stop_button.setEnabled(allowed.stop)
        self.package_bar.unload_button.setEnabled(allowed.unload)
        self.conversation_list.set_enabled(
            manage=allowed.manage, new=allowed.new, export=allowed.export
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

    # -- the transcript ----------------------------------------------------------------

    @Slot()
    def _package_named(self) -> None:
        """An empty transcript names the package Load would load."""
        if not self._loaded and (self.conversation is None or not self.conversation.messages):
            self._render()

    def _render(self, streaming: bool = False) -> None:
        """Redraw the transcript (while `streaming`, the answer in flight is left open)."""
        self._unshown = ""  # the redraw shows the whole answer so far
        self.writer.draw(
            self.conversation,
            self.pending,
            loaded=self._loaded,
            palette=self.palette(),
            streaming=streaming,
            hide=self.page.hidden,
            named=Path(self.package.text().strip()).name if self.package.text().strip() else "",
        )

    def changeEvent(self, event: QEvent) -> None:
        """Redraw the transcript in the new colours when the palette changes."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "writer"):
            self._render(streaming=self.pending is not None)

    @Slot(QUrl)
    def _on_anchor(self, url: QUrl) -> None:
        """Copy links (a message, a code block); web links open in the browser."""
        if url.scheme() in ("http", "https"):
            QDesktopServices.openUrl(url)
            return
        if url.toString().startswith("continues:"):
            earlier = self.conversation.continues if self.conversation is not None else ""
            if earlier:
                self.open_conversation(earlier)
            return
        if url.toString().startswith("play:"):
            clip = self.writer.played_clip(url.toString())
            if clip is None:
                self.status.setText("That clip is gone, or is not a sound file.")
            elif not QDesktopServices.openUrl(QUrl.fromLocalFile(str(clip))):
                self.status.setText("No program on this computer plays that clip.")
            return
        text = self.writer.copied_text(url.toString())
        if text is None:
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
        """Keep the draft; close the workers (on window close)."""
        self.drafts.save_now()
        self.eps.shutdown()
        self.serve_bar.shutdown()
        self.bridge.close()
