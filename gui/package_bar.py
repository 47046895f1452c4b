"""The chat page's package row: the Package field, the library, Choose…, Run on, Load.

Below it, the line that says what is loaded (or why not).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend.vocabulary import EPS
from mmforge.gui.safe_text import for_display, plain_label
from mmforge.gui.state import AppState

TOOLTIP = Qt.ItemDataRole.ToolTipRole


def library_label(name: str, family: str, dtype: str) -> str:
    """A package as the libraries list it: "Qwen2.5-VL-demo-int4: Qwen2.5-VL, int4"."""
    what = ", ".join(w[:40] for w in (family, dtype) if w)
    return f"{name[:60]}: {what}" if what else name[:60]


def package_label(folder: Path) -> str:
    """`library_label` from a package folder's manifest."""
    from mmforge.backend.library import read_manifest

    manifest = read_manifest(folder)
    family, dtype = (str(manifest.get(k) or "") for k in ("family", "dtype"))
    return library_label(folder.name, family, dtype)


class PackageBar(QWidget):
    """Which package to chat with, and on what; Load asks the page to load it.

    Signals:
        load_requested(): Load, Enter in the Package field, or a folder chosen.
        unload_requested(): Unload (the model leaves memory).
    """

    load_requested = Signal()
    unload_requested = Signal()

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.package = QLineEdit(state.package)
        self.package.setAccessibleName("Package folder")
        self.package.returnPressed.connect(self.load_requested)
        self.library = QComboBox()
        self.library.setObjectName("library")
        self.library.setToolTip("Converted packages in the package folder")
        self.library.setMaximumWidth(220)
        self.library.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.library.setMinimumContentsLength(10)
        self.library.activated.connect(self._pick_library)
        choose = QPushButton("Choose…")
        choose.clicked.connect(self.choose_package)
        self.ep = QComboBox()
        self.ep.addItems(list(EPS))
        self.ep.setAccessibleName("Run on")
        self.load_button = QPushButton("Load")
        self.load_button.setObjectName("loadButton")
        self.load_button.clicked.connect(self.load_requested)
        self.unload_button = QPushButton("Unload")
        self.unload_button.setObjectName("unloadButton")
        self.unload_button.setToolTip("Free the memory the loaded model takes")
        self.unload_button.setEnabled(False)
        self.unload_button.clicked.connect(self.unload_requested)
        self.info = plain_label(wrap=True)
        top = QHBoxLayout()
        top.addWidget(QLabel("Package"))
        top.addWidget(self.package, 1)
        for widget in (self.library, choose, self.ep, self.load_button, self.unload_button):
            top.addWidget(widget)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.info)

    def say(self, text: str) -> None:
        """Put `text` on the line under the row (cut for display)."""
        self.info.setText(for_display(text, 2000))

    def set_eps(self, eps: dict[str, Any]) -> None:
        """Offer only the providers this machine runs; each refused one says why."""
        model = self.ep.model()
        for i in range(self.ep.count()):
            reason = eps.get(self.ep.itemText(i))
            item = model.item(i)  # type: ignore[attr-defined]
            item.setEnabled(reason is None)
            item.setToolTip(reason or "")

    @Slot()
    def refresh_library(self) -> None:
        """List the packages in the package folder (and the current one)."""
        folders = {Path(self.state.package)} if self.state.package else set()
        root = self.state.packages_folder()
        if root.is_dir():
            folders |= {p.parent for p in root.glob("*/genai_config.json")}
        packages = sorted(p for p in folders if (p / "genai_config.json").is_file())
        self.library.clear()
        self.library.addItem(f"Library ({len(packages)})")
        for folder in packages:
            # The package's name and what it is; its folder in the tooltip and the data.
            self.library.addItem(package_label(folder), str(folder))
            self.library.setItemData(self.library.count() - 1, str(folder), TOOLTIP)

    @Slot(int)
    def _pick_library(self, index: int) -> None:
        """Load a package picked from the library.

        The field alone would leave the loaded model answering under another package's name.
        """
        picked = str(self.library.itemData(index) or "") if index > 0 else ""
        self.library.setCurrentIndex(0)
        if not picked:
            return
        if not (Path(picked) / "genai_config.json").is_file():
            # Deleted since the list was read: say so; the loaded model keeps answering.
            self.refresh_library()
            self.say(f"{Path(picked).name} is no longer there (deleted or moved).")
            return
        self.package.setText(picked)
        self.load_requested.emit()

    @Slot()
    def choose_package(self) -> None:
        """Pick a package folder and load it."""
        # It opens in the library, where converted packages are (not the working folder).
        start = self.state.packages_folder()
        where = str(start) if start.is_dir() else ""
        folder = QFileDialog.getExistingDirectory(self, "Package folder", where)
        if folder:
            self.package.setText(folder)
            self.load_requested.emit()
