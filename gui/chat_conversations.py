"""The chat page's conversations: list, open, continue, new, rename, delete, export.

`ChatConversations` is one part of `ChatView` (see `chat_view`). Saved conversations are
read from disk here, so reading, renaming, exporting and deleting one needs no model; the
worker writes the conversation it holds and reports it after every change.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Slot
from PySide6.QtWidgets import QInputDialog, QLineEdit, QMessageBox, QWidget

from mmforge.backend.chat.conversations import Conversation, searchable, short_title
from mmforge.backend.errors import MmforgeError
from mmforge.gui.chat_export import ask_and_export, export_to
from mmforge.gui.chat_turns import same_package
from mmforge.gui.errors import show_error
from mmforge.gui.safe_text import as_html

if TYPE_CHECKING:
    from PySide6.QtWidgets import QLineEdit, QPlainTextEdit

    from mmforge.backend.chat.conversations import ConversationStore
    from mmforge.backend.chat.values import SessionInfo
    from mmforge.gui.bridge import ChatBridge
    from mmforge.gui.chat_drafts import DraftKeeper
    from mmforge.gui.chat_input import StatusLine
    from mmforge.gui.chat_turns import Pending
    from mmforge.gui.conversation_list import ConversationList

# Typed as the page it is part of; a plain class at run time (Qt sees only `ChatView`).
if TYPE_CHECKING:
    _Page = QWidget
else:
    _Page = object


RENAME_TITLE = "Rename conversation"


def title_dialog(parent: QWidget, current: str) -> QInputDialog:
    """The rename dialog, wide enough for its own title and a long conversation title.

    Qt sizes a QInputDialog to its label and field; the window manager then cut its title
    to "Renam… ation" on a narrow dialog.
    """
    dialog = QInputDialog(parent)
    dialog.setObjectName("renameDialog")
    dialog.setWindowTitle(RENAME_TITLE)
    dialog.setLabelText("New title:")
    dialog.setTextValue(current)
    title_width = dialog.fontMetrics().horizontalAdvance(RENAME_TITLE)
    # The dialog's layout fixes its size from its children: widen the field, not the
    # dialog (room for the title and the title bar's buttons).
    field = dialog.findChild(QLineEdit)
    if field is not None:
        field.setMinimumWidth(max(400, title_width + 200))
    return dialog


def ask_title(parent: QWidget, current: str) -> str | None:
    """Ask for a conversation's new title (None: cancelled)."""
    dialog = title_dialog(parent, current)
    return dialog.textValue() if dialog.exec() == QInputDialog.DialogCode.Accepted else None


class ChatConversations(_Page):
    """The conversation shown: the worker's, or one read from disk (`local`)."""

    if TYPE_CHECKING:  # what the page (`ChatView`) holds and does
        store: ConversationStore
        bridge: ChatBridge
        conversation_list: ConversationList
        drafts: DraftKeeper
        package: QLineEdit
        status: StatusLine
        conversation: Conversation | None
        local: bool
        pending: Pending | None
        session_info: SessionInfo | None
        _loaded: bool
        _busy: bool

        @property
        def system(self) -> QPlainTextEdit:
            """The open conversation's system prompt (in the settings)."""

        def load(self, conversation: str | None = None) -> None:
            """Load the package in the Package field (`ChatLoading.load`)."""

        def _render(self, streaming: bool = False) -> None: ...
        def _update_buttons(self) -> None: ...
        def cancel_edit(self) -> None:
            """Leave Edit last (`ChatView.cancel_edit`)."""

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
        self.cancel_edit()  # an edit belongs to the conversation it began in
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
        self.cancel_edit()
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
        title = ask_title(self, conversation.title or "")
        if title is None or not title.strip():
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
        self.drafts.forget(conversation.id)  # its unsent message goes with it
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
        copies = self.store.copy_folders(conversation) if conversation is not None else None
        ask_and_export(self, conversation, copies)

    def export_to(self, path: Path, *, as_json: bool) -> None:
        """Write the shown conversation to `path` (see `chat_export.export_to`).

        Only the conversation's own attachment copies are copied beside a Markdown file.
        """
        assert self.conversation is not None
        copies = self.store.copy_folders(self.conversation)
        export_to(self, self.conversation, path, as_json=as_json, copies=copies)

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
            self.conversation_list.set_text(conversation.id, searchable(conversation))
            self.conversation_list.select(conversation.id)
        else:
            self.refresh_conversations()
        self._update_buttons()
