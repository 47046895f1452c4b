"""The saved conversations beside the chat: search, dates, New, Rename, Delete, Export.

Choosing a conversation (click, arrows, Enter) opens it; nothing here needs a model. The
chat page decides what opening, renaming and deleting mean (`ChatView`).
"""

from __future__ import annotations

import time
from datetime import datetime

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend.chat.conversations import Summary
from mmforge.gui.safe_text import as_html

TITLE = Qt.ItemDataRole.UserRole + 1
TEXT = Qt.ItemDataRole.UserRole + 2  # the messages' words, for search


def when(seconds: float, now: float | None = None) -> str:
    """A date as a person reads it in a list: "today 14:05", "yesterday 09:12", "3 Mar 2026"."""
    try:
        then = datetime.fromtimestamp(seconds) if seconds > 0 else None
    except (OverflowError, ValueError, OSError):  # NaN, or past any date a clock shows
        then = None
    if then is None:
        return ""
    today = datetime.fromtimestamp(time.time() if now is None else now).date()
    days = (today - then.date()).days
    if days == 0:
        return f"today {then:%H:%M}"
    if days == 1:
        return f"yesterday {then:%H:%M}"
    return f"{then.day} {then:%b %Y}"


class ConversationList(QWidget):
    """The list and its buttons.

    Signals:
        open_requested(str): the user chose this conversation.
        new_requested(), rename_requested(), delete_requested(), export_requested():
            the buttons (they act on the conversation shown).
    """

    open_requested = Signal(str)
    new_requested = Signal()
    rename_requested = Signal()
    delete_requested = Signal()
    export_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._quiet = False  # selection changed by the page, not by the user
        self.search = QLineEdit()
        self.search.setObjectName("conversationSearch")
        self.search.setAccessibleName("Search conversations")
        self.search.setPlaceholderText("Search conversations")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._filter)
        self.items = QListWidget()
        self.items.setObjectName("conversations")
        self.items.setAccessibleName("Conversations")
        self.items.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.items.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.items.currentItemChanged.connect(self._chosen)
        self.items.itemActivated.connect(self._activated)
        self.items.itemClicked.connect(self._activated)
        self.items.itemDoubleClicked.connect(self.rename_requested)
        self.nothing = QLabel()
        self.nothing.setObjectName("noConversationMatches")
        self.nothing.setWordWrap(True)
        self.nothing.hide()
        self.new_button = QPushButton("New")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.new_requested)
        self.rename_button = QPushButton("Rename…")
        self.rename_button.setToolTip("Give the open conversation a title (or double-click)")
        self.rename_button.clicked.connect(self.rename_requested)
        self.delete_button = QPushButton("Delete…")
        self.delete_button.setToolTip("Delete the open conversation")
        self.delete_button.clicked.connect(self.delete_requested)
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("Save the open conversation as Markdown or JSON")
        self.export_button.clicked.connect(self.export_requested)
        side = QVBoxLayout(self)
        side.setContentsMargins(0, 0, 0, 0)
        side.addWidget(QLabel("Conversations"))
        side.addWidget(self.search)
        side.addWidget(self.nothing)
        side.addWidget(self.items, 1)
        pairs = ((self.new_button, self.rename_button), (self.delete_button, self.export_button))
        for pair in pairs:
            row = QHBoxLayout()
            for button in pair:
                row.addWidget(button)
            side.addLayout(row)
        self.setMaximumWidth(240)

    # -- what the page tells it ----------------------------------------------------------

    def fill(self, summaries: list[Summary]) -> None:
        """Show these conversations (newest first)."""
        self._quiet = True
        try:
            self.items.clear()
            for s in summaries:
                item = self._item(s.id, s.title or "(untitled)", when(s.updated))
                item.setToolTip(as_html(f"{s.title}\n{s.messages} messages with {s.package}"))
                item.setData(TEXT, s.text)
                self.items.addItem(item)
        finally:
            self._quiet = False
        self._filter(self.search.text())

    def item_for(self, conversation_id: str) -> QListWidgetItem | None:
        """The entry of a conversation, if listed."""
        for i in range(self.items.count()):
            item = self.items.item(i)
            if item.data(Qt.ItemDataRole.UserRole) == conversation_id:
                return item
        return None

    def ensure(self, conversation_id: str, title: str, updated: float = 0.0) -> None:
        """List a conversation (first, when new) under this title."""
        item = self.item_for(conversation_id)
        if item is None:
            self._quiet = True
            try:
                self.items.insertItem(0, self._item(conversation_id, title, when(updated)))
            finally:
                self._quiet = False
        elif item.data(TITLE) != title:
            self._label(item, title, when(updated))

    def refresh_entry(self, conversation_id: str, title: str, updated: float, tooltip: str) -> None:
        """A conversation changed (a turn, a rename): its title, date and tooltip."""
        item = self.item_for(conversation_id)
        if item is not None:
            self._label(item, title or str(item.data(TITLE)), when(updated))
            item.setToolTip(as_html(tooltip))

    def select(self, conversation_id: str | None) -> None:
        """Highlight the conversation shown (nothing when None)."""
        item = self.item_for(conversation_id) if conversation_id else None
        self._quiet = True
        try:
            if item is None:
                self.items.setCurrentRow(-1)
            else:
                self.items.setCurrentItem(item)
        finally:
            self._quiet = False

    def current_title(self) -> str:
        """The highlighted conversation's title ("" for none)."""
        item = self.items.currentItem()
        return str(item.data(TITLE)) if item is not None else ""

    def set_enabled(self, *, manage: bool, new: bool, export: bool) -> None:
        """Rename and Delete (`manage`), New and Export."""
        self.rename_button.setEnabled(manage)
        self.delete_button.setEnabled(manage)
        self.new_button.setEnabled(new)
        self.export_button.setEnabled(export)

    # -- internals -----------------------------------------------------------------------

    def _item(self, conversation_id: str, title: str, date: str) -> QListWidgetItem:
        item = QListWidgetItem()
        item.setData(Qt.ItemDataRole.UserRole, conversation_id)
        self._label(item, title, date)
        return item

    def _label(self, item: QListWidgetItem, title: str, date: str) -> None:
        item.setData(TITLE, title)
        item.setText(f"{title}\n{date}" if date else title)
        item.setData(Qt.ItemDataRole.AccessibleTextRole, f"{title}, {date}" if date else title)

    def set_text(self, conversation_id: str, text: str) -> None:
        """What search finds in a conversation (its messages changed)."""
        item = self.item_for(conversation_id)
        if item is not None:
            item.setData(TEXT, text)
            self._filter(self.search.text())

    @Slot(str)
    def _filter(self, text: str) -> None:
        """Show the conversations whose title or messages hold every word typed."""
        words = text.casefold().split()
        shown = 0
        for i in range(self.items.count()):
            item = self.items.item(i)
            haystack = f"{item.data(TITLE)} {item.toolTip()} {item.data(TEXT) or ''}".casefold()
            hidden = not all(w in haystack for w in words)
            item.setHidden(hidden)
            shown += not hidden
        if words and not shown and self.items.count():
            self.nothing.setText(f"No conversation mentions “{text.strip()[:40]}”.")
            self.nothing.show()
        else:
            self.nothing.hide()

    @Slot(QListWidgetItem, QListWidgetItem)
    def _chosen(self, item: QListWidgetItem | None, _: QListWidgetItem | None = None) -> None:
        if item is not None and not self._quiet:
            self.open_requested.emit(str(item.data(Qt.ItemDataRole.UserRole)))

    @Slot(QListWidgetItem)
    def _activated(self, item: QListWidgetItem) -> None:
        if not self._quiet:
            self.open_requested.emit(str(item.data(Qt.ItemDataRole.UserRole)))
