"""The Compare page's two packages: picked from the library, or any package folder.

By default package A is the one Chat has loaded (or the current one) and B another
package of the same model, another precision first (`backend.chat.compare.sibling`).
Once a model is picked (gui/selection.py), only its packages are offered by default: a
pair of the model picked before is not kept, nor picked again.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGridLayout,
    QLabel,
    QPushButton,
    QWidget,
)

from mmforge.backend.chat.compare import ASK, DIFFERENT, kinship, sibling
from mmforge.backend.library import PackageEntry, packages, read_package
from mmforge.backend.vocabulary import EPS
from mmforge.gui.errors import show_error
from mmforge.gui.safe_text import as_html, plain_label
from mmforge.gui.state import AppState

LETTERS = ("A", "B")
NO_PACKAGES = (
    "No packages yet: convert a model at two precisions (for example f32 and int4) on the "
    "Convert page, then compare their answers here."
)


class PackagePair(QWidget):
    """Packages A and B, where they run, and whether they answer at once.

    Signals:
        changed(): another package was picked (or the list was read again).
    """

    changed = Signal()

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.entries: list[PackageEntry] = []
        self._extra: set[Path] = set()  # packages picked with Choose… outside the folder
        self._auto = True  # the pair follows the loaded package until the user picks one
        self.setLayout(self._rows())
        state.library_changed.connect(self.refresh)
        state.package_changed.connect(self.refresh)
        state.changed.connect(self._on_selection)
        self.refresh()

    @Slot(object)
    def _on_selection(self, fields: frozenset[str]) -> None:
        """Another model or package: the pair the user picked goes (the selection says)."""
        if "compared" in fields and self.state.selection.compared is None:
            self._auto = True
        if fields & {"compared", "source", "package", "loaded"}:
            self.refresh()

    def _of_choice(self, entry: PackageEntry) -> bool:
        """Whether a package is of the model picked (any is, before one is picked)."""
        source = self.state.selection.source
        return not source or entry.source == source

    def _rows(self) -> QGridLayout:
        grid = QGridLayout()
        grid.setContentsMargins(0, 0, 0, 0)
        self.pickers: list[QComboBox] = []
        for i, letter in enumerate(LETTERS):
            picker = QComboBox()
            picker.setObjectName(f"comparePackage{letter}")
            picker.setAccessibleName(f"Package {letter}")
            picker.setSizeAdjustPolicy(
                QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
            )
            picker.setMinimumContentsLength(16)
            picker.currentIndexChanged.connect(self._advise)
            picker.currentIndexChanged.connect(self.changed)
            picker.activated.connect(self._user_picked)
            choose = QPushButton("Choose…")
            choose.setToolTip(f"Pick package {letter}'s folder")
            choose.clicked.connect(partial(self.choose, i))
            grid.addWidget(QLabel(f"Package {letter}"), i, 0)
            grid.addWidget(picker, i, 1)
            grid.addWidget(choose, i, 2)
            self.pickers.append(picker)
        self.ep = QComboBox()
        self.ep.addItems(list(EPS))
        self.ep.setAccessibleName("Run on")
        grid.addWidget(QLabel("Run on"), 0, 3)
        grid.addWidget(self.ep, 0, 4)
        self.together = QCheckBox("Both at once")
        self.together.setToolTip(
            "Faster on a machine with many cores; on a laptop each answer then runs at "
            "about half its speed, so the speeds no longer compare the packages"
        )
        grid.addWidget(self.together, 1, 3, 1, 2)
        # What to do first, when the library holds no pair to compare.
        self.advice = plain_label(wrap=True)
        self.advice.setObjectName("compareAdvice")
        grid.addWidget(self.advice, 2, 0, 1, 5)
        grid.setColumnStretch(1, 1)
        return grid

    @Slot()
    def _advise(self) -> None:
        """Say what to convert first when there is no package, or no second one to pick."""
        a = self.entry(0)
        source = self.state.selection.source
        if not self.entries:
            text = NO_PACKAGES
        elif a is None and source and not any(self._of_choice(e) for e in self.entries):
            text = (
                f"No package of {Path(source.rstrip('/')).name} yet: convert it at two "
                "precisions on the Convert page, or pick two packages above."
            )
        elif a is not None and self.chosen(1) is None and sibling(a, self.entries) is None:
            text = (
                f"No other package of {a.folder.name}'s model: convert its model at another "
                "precision (for example int4) on the Convert page to compare the two."
            )
        else:
            text = ""
        self.advice.setText(text)
        self.advice.setVisible(bool(text))

    @Slot()
    def refresh(self) -> None:
        """List the packages again; keep the ones picked, else pick a pair of one model."""
        chosen: list[Path | None] = [self.chosen(i) for i in range(2)]
        if self._auto:
            chosen = [None, None]
        defaults = [Path(p) for p in (self.state.loaded_package, self.state.package) if p]
        try:
            self.entries = packages(self.state.packages_folder(), [*defaults, *self._extra])
        except OSError:
            self.entries = []
        if chosen[0] is None:
            mine = [e for e in self.entries if self._of_choice(e)]
            first = next((e for d in defaults for e in mine if e.folder == d), None)
            first = first or (mine[0] if mine else None)
            chosen[0] = first.folder if first is not None else None
        if chosen[1] is None and (a := self._entry(chosen[0])) is not None:
            other = sibling(a, self.entries)
            chosen[1] = other.folder if other is not None else None
        for picker, folder in zip(self.pickers, chosen, strict=True):
            picker.blockSignals(True)
            picker.clear()
            for e in self.entries:
                picker.addItem(f"{e.folder.name} · {e.dtype}", str(e.folder))
                tip = as_html(f"{e.folder}\nconverted from {e.source}")
                picker.setItemData(picker.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
            picker.setCurrentIndex(picker.findData(str(folder)) if folder is not None else -1)
            picker.blockSignals(False)
        self._advise()
        self.changed.emit()

    @Slot()
    def _user_picked(self) -> None:
        self._auto = False
        self._remember_pair()

    def _remember_pair(self) -> None:
        pair = [self.chosen(i) for i in range(2)]
        self.state.selection.set_compared(tuple(str(p) if p else "" for p in pair))

    def entry(self, i: int) -> PackageEntry | None:
        """Package A's (0) or B's (1) library entry; None when none is picked."""
        folder = self.chosen(i)
        return next((e for e in self.entries if e.folder == folder), None)

    def _entry(self, folder: Path | None) -> PackageEntry | None:
        return next((e for e in self.entries if e.folder == folder), None)

    def chosen(self, i: int) -> Path | None:
        """The folder of package A (0) or B (1); None when none is picked."""
        data = self.pickers[i].currentData()
        return Path(data) if isinstance(data, str) and data else None

    def choose_pair(self, a: Path, b: Path) -> None:
        """Pick packages A and B (folders outside the package folder too)."""
        self._extra |= {a, b}
        self._auto = False
        self.refresh()
        for picker, folder in zip(self.pickers, (a, b), strict=True):
            picker.setCurrentIndex(picker.findData(str(folder)))
        self._remember_pair()

    @Slot()
    def choose(self, i: int) -> None:
        """Pick package A's (0) or B's (1) folder with a folder dialog."""
        folder = QFileDialog.getExistingDirectory(self, f"Package {LETTERS[i]}")
        if not folder:
            return
        if read_package(Path(folder)) is None:
            show_error(
                self,
                {
                    "message": f"{Path(folder).name} is not a package",
                    "hint": "Pick a folder that Multimodal Forge converted a model into",
                },
            )
            return
        self._extra.add(Path(folder))
        self._auto = False
        self.refresh()
        self.pickers[i].setCurrentIndex(self.pickers[i].findData(folder))
        self._remember_pair()

    def refusal(self) -> dict[str, str] | None:
        """Why the two packages picked cannot be compared (None: they can)."""
        a, b = self.entry(0), self.entry(1)
        if a is None or b is None:
            return {
                "message": "Pick two packages to compare",
                "hint": "Convert one model at two precisions (for example f32 and int4) "
                "and pick one package for each column",
            }
        if a.folder == b.folder:
            return {
                "message": "Packages A and B are the same package",
                "hint": "Pick another package of the same model for B (for example its int4 one)",
            }
        kin = kinship(a, b)
        if kin.kind == DIFFERENT:
            return {
                "message": "These two packages are of different models, so their answers "
                "cannot be compared token by token",
                "hint": f"{kin.reason}. Pick two packages converted from the same model "
                "(for example its f32 and its int4 package).",
            }
        return None

    def doubt(self) -> str | None:
        """Why the two packages picked may not be of one model (None: they are, or refused)."""
        a, b = self.entry(0), self.entry(1)
        if a is None or b is None:
            return None
        kin = kinship(a, b)
        return kin.reason if kin.kind == ASK else None
