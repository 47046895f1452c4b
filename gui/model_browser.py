"""Find a model: search the hub, or pick from the built-in list of known-good models.

Each result says its family and whether mmforge converts it. Names, tags and counts come
from the hub, written by strangers: they are checked in the backend (`hubsearch`) and
shown here as plain text (list items and plain labels). The search is a few small HTTP
requests, run on a thread (as the account dialog's checks are): no worker process, and
Cancel stops waiting at once.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend.errors import Cancelled, MmforgeError
from mmforge.backend.jobs import JobContext
from mmforge.gui.safe_text import SHORT, for_display, plain_label

log = logging.getLogger(__name__)

REPO_ROLE = Qt.ItemDataRole.UserRole


class BackgroundCall(QObject):
    """One function on a daemon thread, with a cancel token; results in the GUI thread.

    Signals:
        succeeded(value), failed(dict error), finished() after either (not after cancel:
        a cancelled call reports nothing).
    """

    succeeded = Signal(object)
    failed = Signal(dict)
    finished = Signal()
    _wake = Signal()  # from the thread, queued to the GUI thread; no payload (see bridge)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._events: queue.Queue[tuple[str, Any, JobContext]] = queue.Queue()
        self._wake.connect(self._dispatch, Qt.ConnectionType.QueuedConnection)
        self._ctx: JobContext | None = None

    @property
    def running(self) -> bool:
        """Whether a call is under way (and not cancelled)."""
        return self._ctx is not None

    def start(self, fn: Callable[[JobContext], Any]) -> None:
        """Run `fn(ctx)`; a call still running is cancelled first."""
        self.cancel()
        ctx = self._ctx = JobContext()

        def run() -> None:
            try:
                outcome: tuple[str, Any] = ("succeeded", fn(ctx))
            except Cancelled:
                return
            except MmforgeError as e:
                outcome = ("failed", {"message": e.user_message, "hint": e.hint, "kind": e.kind})
            except Exception as e:
                log.warning("hub search failed", exc_info=True)
                outcome = ("failed", {"message": f"The search failed: {type(e).__name__}"})
            self._events.put((*outcome, ctx))
            self._wake.emit()

        threading.Thread(target=run, name="hub search", daemon=True).start()

    @Slot()
    def cancel(self) -> None:
        """Stop waiting for the call (it ends at its next check, reporting nothing)."""
        if self._ctx is not None:
            self._ctx.cancel.cancel()
            self._ctx = None

    @Slot()
    def _dispatch(self) -> None:
        while True:
            try:
                kind, payload, ctx = self._events.get_nowait()
            except queue.Empty:
                return
            if ctx is not self._ctx:
                continue  # a cancelled or replaced call
            self._ctx = None
            (self.succeeded if kind == "succeeded" else self.failed).emit(payload)
            self.finished.emit()


def result_text(found: Any) -> str:
    """One result as plain text: the id, then its family mark, downloads and gating."""
    parts = [found.mark.words()]
    if found.downloads:  # none for a known model offered as a near name
        parts.append(f"{found.downloads:,} downloads")
    if found.gated:
        parts.append("gated: accept its terms on the hub and sign in")
    return f"{found.repo_id}\n    {for_display(' · '.join(parts), SHORT)}"


class ModelBrowser(QDialog):
    """Search the hub and the known-good list; `chosen(repo_id)` when one is picked.

    Args:
        parent: The window.
        not_found: A hub id that Inspect could not find: the dialog says so and offers the
            closest names the hub has.
    """

    chosen = Signal(str)
    sign_in_requested = Signal()

    def __init__(self, parent: QWidget | None = None, not_found: str | None = None):
        super().__init__(parent)
        self.setWindowTitle("Find a model")
        self.setObjectName("modelBrowser")
        self.resize(720, 520)  # fits a 1024×600 screen with its frame
        self._suggesting = False  # the call in hand looks for near names
        self._current: str | None = None  # the id selected in either list
        self.call = BackgroundCall(self)
        self.call.succeeded.connect(self._on_result)
        self.call.failed.connect(self._on_failed)
        self.call.finished.connect(lambda: self._busy(False))
        self.header = plain_label(wrap=True)
        self.header.setObjectName("browserHeader")
        self.header.setVisible(False)
        self.query = QLineEdit(placeholderText="Search the Hugging Face hub, e.g. qwen vl")
        self.query.setAccessibleName("Search the hub")
        self.query.setMaxLength(96)
        self.query.returnPressed.connect(self.search)
        self.search_button = QPushButton("Search")
        self.search_button.clicked.connect(self.search)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.cancel)
        row = QHBoxLayout()
        row.addWidget(self.query, 1)
        row.addWidget(self.search_button)
        row.addWidget(self.cancel_button)
        self.status = plain_label(wrap=True)
        self.status.setObjectName("browserStatus")
        self.results = QListWidget()
        self.results.setObjectName("searchResults")
        self.results.setAccessibleName("Models found on the hub")
        self.results.setWordWrap(True)
        self.results.itemActivated.connect(self._pick)
        self.known = QListWidget()
        self.known.setObjectName("knownModels")
        self.known.setAccessibleName("Known good models")
        self.known.setWordWrap(True)
        self.known.itemActivated.connect(self._pick)
        self.sign_in_button = QPushButton("Sign in…")
        self.sign_in_button.setToolTip("Private and gated models need a Hugging Face token")
        self.sign_in_button.clicked.connect(self.sign_in_requested)
        self.sign_in_button.setVisible(False)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.use_button = buttons.addButton(
            "Use this model", QDialogButtonBox.ButtonRole.AcceptRole
        )
        self.use_button.setEnabled(False)
        self.use_button.clicked.connect(self._use_selected)
        buttons.rejected.connect(self.reject)
        self.results.currentItemChanged.connect(self._selected)
        self.known.currentItemChanged.connect(self._selected)
        layout = QVBoxLayout(self)
        layout.addWidget(self.header)
        layout.addLayout(row)
        layout.addWidget(self.status)
        layout.addWidget(self.results, 3)
        layout.addWidget(QLabel("<b>Known good models</b> (they convert; sizes approximate)"))
        self.known_note = plain_label(wrap=True)
        layout.addWidget(self.known_note)
        layout.addWidget(self.known, 2)
        bottom = QHBoxLayout()
        bottom.addWidget(self.sign_in_button)
        bottom.addStretch(1)
        bottom.addWidget(buttons)
        layout.addLayout(bottom)
        self._fill_known()
        if not_found:
            self.did_you_mean(not_found)

    def _fill_known(self) -> None:
        from mmforge.backend.known_models import known_models, known_note

        try:
            models = known_models()
        except MmforgeError as e:
            self.known_note.setText(e.one_line())
            return
        self.known_note.setText(known_note())
        for m in models:
            words = ", ".join(w for w in (m.size_words(), m.note) if w)
            item = QListWidgetItem(f"{m.repo_id}\n    {m.family}: converts · {words}")
            item.setData(REPO_ROLE, m.repo_id)
            self.known.addItem(item)

    def _busy(self, busy: bool) -> None:
        self.search_button.setEnabled(not busy)
        self.cancel_button.setVisible(busy)

    @Slot()
    def search(self) -> None:
        """Search the hub for the words in the search field (off the GUI thread)."""
        from mmforge.backend.hubsearch import search_models

        words = self.query.text().strip()
        self.results.clear()
        self.status.setText(f"Searching the hub for {words}…" if words else "Searching…")
        self._busy(True)
        self.call.start(lambda ctx: search_models(words, ctx).found)

    def did_you_mean(self, repo_id: str) -> None:
        """Say that `repo_id` was not found, and look for the closest names."""
        from mmforge.backend.hubsearch import suggestions

        shown = for_display(repo_id, SHORT)
        self.header.setText(
            f"{shown} was not found on the hub (or it is private). Check the spelling, "
            "pick one of the names below, or sign in if it is a private model of yours."
        )
        self.header.setVisible(True)
        self.sign_in_button.setVisible(True)
        self.query.setText(repo_id.split("@", 1)[0].rsplit("/", 1)[-1][:96])
        self.results.clear()
        self.status.setText("Looking for similar names…")
        self._busy(True)
        self._suggesting = True
        self.call.start(lambda ctx: suggestions(repo_id, ctx))

    @Slot()
    def cancel(self) -> None:
        """Stop the search in hand."""
        self.call.cancel()
        self._busy(False)
        self.status.setText("Search cancelled.")

    @Slot(object)
    def _on_result(self, found: Any) -> None:
        suggesting, self._suggesting = self._suggesting, False
        for entry in found:
            item = QListWidgetItem(result_text(entry))
            item.setData(REPO_ROLE, entry.repo_id)
            self.results.addItem(item)
        if suggesting:
            self.status.setText(
                "Did you mean one of these?" if found else "No similar names on the hub."
            )
        else:
            self.status.setText(
                f"{len(found)} models found, most downloaded first."
                if found
                else "No multimodal model on the hub matches."
            )
        if found:
            self.results.setCurrentRow(0)

    @Slot(dict)
    def _on_failed(self, error: dict[str, Any]) -> None:
        self._suggesting = False
        text = str(error.get("message") or "")
        if error.get("hint"):
            text += " " + str(error["hint"])
        self.status.setText(for_display(text, SHORT))

    @Slot(QListWidgetItem, QListWidgetItem)
    def _selected(self, item: QListWidgetItem | None, _: QListWidgetItem | None = None) -> None:
        self.use_button.setEnabled(item is not None)
        self._current = item.data(REPO_ROLE) if item is not None else None

    @Slot()
    def _use_selected(self) -> None:
        if self._current:
            self.chosen.emit(self._current)
            self.accept()

    @Slot(QListWidgetItem)
    def _pick(self, item: QListWidgetItem) -> None:
        self.chosen.emit(str(item.data(REPO_ROLE)))
        self.accept()

    def done(self, result: int) -> None:
        """Closing stops any search in hand."""
        self.call.cancel()
        super().done(result)
