"""The library: converted packages and downloaded models, with sizes, dates and Delete.

Packages live in one folder (the Convert page's default), which can be moved; models
downloaded from the hub live in the Hugging Face cache, which this dialog reads and
prunes through huggingface_hub's own cache API.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt, QUrl, Signal, Slot
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend.errors import MmforgeError
from mmforge.backend.library import (
    CachedModel,
    PackageEntry,
    cached_models,
    delete_cached,
    delete_package,
    move_packages,
    packages,
)
from mmforge.backend.units import human_bytes
from mmforge.gui.errors import show_error
from mmforge.gui.safe_text import as_html, plain_label
from mmforge.gui.state import AppState


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _table(headers: list[str], name: str) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.setAccessibleName(name)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.verticalHeader().setVisible(False)
    table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    return table


def _tab(label: QLabel, table: QTableWidget, buttons: QHBoxLayout) -> QWidget:
    """A tab: what it holds in words, the table, and its buttons."""
    tab = QWidget()
    layout = QVBoxLayout(tab)
    layout.addWidget(label)
    layout.addWidget(table, 1)
    layout.addLayout(buttons)
    return tab


MAX_COLUMN = 260  # px: the widest a column after the first gets (its cells elide)


def _fill(table: QTableWidget, rows: list[tuple[str, ...]]) -> None:
    table.setRowCount(len(rows))
    for i, row in enumerate(rows):
        for j, text in enumerate(row):
            item = QTableWidgetItem(text)
            item.setToolTip(as_html(text))  # a cell cut short is read whole here
            if j and text.endswith("B"):
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            table.setItem(i, j, item)
    for j in range(1, table.columnCount()):
        table.resizeColumnToContents(j)
        # A long model name or path would leave the first column a few letters wide.
        table.setColumnWidth(j, min(table.columnWidth(j), MAX_COLUMN))
    if rows:
        table.selectRow(0)


class LibraryDialog(QDialog):
    """Packages (open, chat, delete, move the folder) and downloaded models (delete).

    Signals:
        chat_requested(str): chat with this package folder.
    """

    chat_requested = Signal(str)

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.setWindowTitle("Library")
        self.resize(820, 480)
        self.tabs = QTabWidget()
        self.tabs.addTab(self._packages_tab(), "Converted packages")
        self.tabs.addTab(self._models_tab(), "Downloaded models")
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(close)
        self._packages: list[PackageEntry] = []
        self._models: list[CachedModel] = []
        self.refresh()

    def _packages_tab(self) -> QWidget:
        self.package_table = _table(
            ["Package", "Model", "Precision", "Size", "Converted"], "Converted packages"
        )
        self.package_table.doubleClicked.connect(self._chat)
        self.folder_label = plain_label()
        self.folder_label.setWordWrap(True)
        self.folder_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        buttons = QHBoxLayout()
        self.open_button = QPushButton("Open folder")
        self.open_button.clicked.connect(self._open_package)
        self.chat_button = QPushButton("Chat with it")
        self.chat_button.clicked.connect(self._chat)
        self.delete_package_button = QPushButton("Delete…")
        self.delete_package_button.clicked.connect(self._delete_package)
        self.move_button = QPushButton("Move library…")
        self.move_button.setToolTip("Choose another folder for packages; the ones here move too")
        self.move_button.clicked.connect(self._move)
        for b in (self.open_button, self.chat_button, self.delete_package_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.move_button)
        return _tab(self.folder_label, self.package_table, buttons)

    def _models_tab(self) -> QWidget:
        self.model_table = _table(["Model", "Size", "Last used"], "Downloaded models")
        self.cache_label = plain_label()
        self.cache_label.setWordWrap(True)
        self.delete_model_button = QPushButton("Delete…")
        self.delete_model_button.clicked.connect(self._delete_model)
        buttons = QHBoxLayout()
        buttons.addWidget(self.delete_model_button)
        buttons.addStretch(1)
        return _tab(self.cache_label, self.model_table, buttons)

    @Slot()
    def refresh(self) -> None:
        """Read both lists again."""
        root = self.state.packages_folder()
        extra = [Path(self.state.package)] if self.state.package else []
        self._packages = packages(root, extra)
        total = sum(e.size_bytes for e in self._packages)
        self.folder_label.setText(
            f"Library folder: {root} — {_count(len(self._packages), 'package')}, "
            f"{human_bytes(total)}"
        )
        _fill(
            self.package_table,
            [
                (
                    str(e.folder) if e.folder.parent != root else e.folder.name,
                    f"{e.family} ({e.source})",
                    e.dtype,
                    human_bytes(e.size_bytes),
                    _when(e.converted),
                )
                for e in self._packages
            ],
        )
        self._models = cached_models()
        held = sum(m.size_bytes for m in self._models)
        self.cache_label.setText(
            f"Models downloaded from the hub, in the Hugging Face cache (shared with other "
            f"tools): {_count(len(self._models), 'model')}, {human_bytes(held)}. A conversion "
            "reads them from "
            "there; deleting one means downloading it again to convert it."
        )
        _fill(
            self.model_table,
            [(m.repo_id, human_bytes(m.size_bytes), _when(m.last_used)) for m in self._models],
        )
        has_packages, has_models = bool(self._packages), bool(self._models)
        for b in (self.open_button, self.chat_button, self.delete_package_button):
            b.setEnabled(has_packages)
        self.delete_model_button.setEnabled(has_models)

    def _selected_package(self) -> PackageEntry | None:
        row = self.package_table.currentRow()
        return self._packages[row] if 0 <= row < len(self._packages) else None

    @Slot()
    def _open_package(self) -> None:
        entry = self._selected_package()
        if entry is not None and not QDesktopServices.openUrl(
            QUrl.fromLocalFile(str(entry.folder))
        ):
            # No file manager to open it (or none set up): the path, to paste elsewhere.
            QApplication.clipboard().setText(str(entry.folder))
            show_error(
                self,
                {
                    "message": "No file manager on this computer opened the folder",
                    "hint": f"Its path is copied to the clipboard: {entry.folder}",
                },
            )

    @Slot()
    def _chat(self) -> None:
        entry = self._selected_package()
        if entry is not None:
            self.chat_requested.emit(str(entry.folder))
            self.accept()

    def _confirm(self, title: str, text: str) -> bool:
        answer = QMessageBox.question(
            self,
            title,
            as_html(text),  # it names folders and models: shown as text
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
        )
        return answer == QMessageBox.StandardButton.Yes

    @Slot()
    def _delete_package(self) -> None:
        entry = self._selected_package()
        if entry is None or not self._confirm(
            "Delete package",
            f"Delete {entry.folder} ({human_bytes(entry.size_bytes)})? The model it came "
            "from is kept; converting it again makes the package again.",
        ):
            return
        try:
            delete_package(entry.folder)
        except MmforgeError as e:
            show_error(self, {"message": e.user_message, "hint": e.hint})
        if self.state.package == str(entry.folder):
            self.state.set_package("")
        self.state.packages_removed()
        self.refresh()

    @Slot()
    def _delete_model(self) -> None:
        row = self.model_table.currentRow()
        if not 0 <= row < len(self._models):
            return
        model = self._models[row]
        if not self._confirm(
            "Delete downloaded model",
            f"Delete {model.repo_id} ({human_bytes(model.size_bytes)}) from the Hugging Face "
            "cache? Packages converted from it are kept.",
        ):
            return
        try:
            delete_cached(model)
        except MmforgeError as e:
            show_error(self, {"message": e.user_message, "hint": e.hint})
        self.refresh()

    @Slot()
    def _move(self) -> None:
        old = self.state.packages_folder()
        chosen = QFileDialog.getExistingDirectory(self, "New library folder", str(old.parent))
        if chosen:
            self.move_to(Path(chosen))

    def move_to(self, new: Path) -> None:
        """Make `new` the library folder, moving the packages there (asked first)."""
        old = self.state.packages_folder()
        count = len(packages(old))
        if count and not self._confirm(
            "Move library",
            f"Move {_count(count, 'package')} from {old} to {new}? Across disks this copies them "
            "first, which can take a while.",
        ):
            return
        QApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            moved = move_packages(old, new, lambda f: QApplication.processEvents())
        except MmforgeError as e:
            show_error(self, {"message": e.user_message, "hint": e.hint})
            return
        finally:
            QApplication.restoreOverrideCursor()
        self.state.settings.setValue("packages_folder", str(new))
        current = Path(self.state.package) if self.state.package else None
        if current is not None and current.parent == old and (new / current.name).is_dir():
            self.state.set_package(str(new / current.name))
        elif moved:
            self.state.package_changed.emit(self.state.package)  # lists follow the move
        self.refresh()
