"""Convert page: dtype and target, per-stage progress, Cancel, the manifest and weights."""

from __future__ import annotations

import html
import json
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend import precisions
from mmforge.backend.convert import Manifest
from mmforge.backend.inspect import Profile
from mmforge.backend.units import human_bytes, human_rate
from mmforge.backend.vocabulary import EPS
from mmforge.gui.bridge import JobRunner
from mmforge.gui.chat_turns import same_package
from mmforge.gui.details import Details
from mmforge.gui.errors import show_error
from mmforge.gui.fit import (
    CPU_CUDA,
    conversion_problems,
    has_gpu,
    precision_words,
    this_machine,
)
from mmforge.gui.safe_text import as_html, for_display, plain_label
from mmforge.gui.state import AppState

DTYPES = precisions.DTYPES
STAGES = ("download", "inspect", "build", "weights", "write", "quantize", "package", "validate")
FILTERS = ("all", "mapped", "unused", "missing", "shape mismatch")
TARGETS = {
    "cpu": "CPU: runs on any computer's processor.",
    "cuda": "CUDA: runs on an NVIDIA graphics card (GPU), much faster; it needs one.",
}


class ConvertView(QWidget):
    """Run a conversion in a worker and show what it made.

    Signals:
        verify_requested(): go on to Verify.
        chat_requested(): go on to Chat with the new package.
    """

    verify_requested = Signal()
    chat_requested = Signal()

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.runner = JobRunner(self)
        self.source = plain_label("No model picked yet: start on the Model page.")
        # The page's plain sentence: what converting will make, how big, for what.
        self.lead = plain_label(wrap=True)
        self.lead.setObjectName("convertLead")
        self.dtype = QComboBox()
        self.dtype.addItems(list(DTYPES))
        self.dtype.setCurrentText(state.text("dtype", "f32"))
        self.target = QComboBox()
        self.target.addItems(list(EPS))
        self.target.setCurrentText(state.text("target", "cpu"))
        self.target.setToolTip(CPU_CUDA)
        for i, ep in enumerate(EPS):
            self.target.setItemData(i, TARGETS.get(ep, ep), Qt.ItemDataRole.ToolTipRole)
        self.dtype_words = plain_label(wrap=True)
        self.dtype_words.setObjectName("precisionWords")
        self.target_words = plain_label(wrap=True)
        self.target_words.setObjectName("targetWords")
        self._profile: Profile | None = None
        self._has_gpu = has_gpu()
        self.output = QLineEdit()
        self.output.setObjectName("outputEdit")
        self.output.setAccessibleName("Package folder to write")
        self.browse_button = browse = QPushButton("Choose…")
        browse.clicked.connect(self.browse)
        out_row = QHBoxLayout()
        out_row.addWidget(self.output, 1)
        out_row.addWidget(browse)
        form = QFormLayout()
        form.addRow("Model", self.source)
        form.addRow("Precision", _beside(self.dtype, self.dtype_words))
        form.addRow("Target", _beside(self.target, self.target_words))
        form.addRow("Package folder", out_row)
        self.convert_button = QPushButton("Convert")
        self.convert_button.setObjectName("convertButton")
        self.convert_button.clicked.connect(self.convert)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setObjectName("cancelButton")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        buttons = QHBoxLayout()
        buttons.addWidget(self.convert_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        self.overall = QProgressBar()
        self.overall.setRange(0, 1000)
        self.overall.setFormat("all stages: %p%")
        self.overall.setAccessibleName("Conversion progress, all stages")
        # The stage in hand on its own bar: a download is one of eight stages, and its
        # share of the overall bar says little about how far the download is.
        self.stage_bar = QProgressBar()
        self.stage_bar.setRange(0, 1000)
        self.stage_bar.setAccessibleName("Progress of the current stage")
        self.stage = plain_label()
        self.log_toggle = QPushButton("Show log")
        self.log_toggle.setCheckable(True)
        self.log = QPlainTextEdit(readOnly=True)
        self.log.setAccessibleName("Conversion log")
        self.log.setVisible(False)
        self.log_toggle.toggled.connect(self._toggle_log)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.filter = QComboBox()
        self.filter.addItems(FILTERS)
        self.filter.currentTextChanged.connect(self._fill_weights)
        self.weights = QTableWidget(0, 4)
        self.weights.setAccessibleName("Weights in the package")
        self.weights.setHorizontalHeaderLabels(
            ["checkpoint tensor", "status", "initializer", "shape"]
        )
        header = self.weights.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.ResizeToContents)
        self.weights.setWordWrap(False)
        self.weights.verticalHeader().setVisible(False)
        self.next_button = QPushButton("Verify →")
        self.next_button.setEnabled(False)
        self.next_button.clicked.connect(self.verify_requested)
        # When a conversion ends: where it is, and straight to talking with it.
        self.open_button = QPushButton("Open folder")
        self.open_button.setEnabled(False)
        self.open_button.clicked.connect(self._open_folder)
        self.chat_button = QPushButton("Chat with it →")
        self.chat_button.setEnabled(False)
        self.chat_button.clicked.connect(self.chat_requested)
        layout = QVBoxLayout(self)
        layout.addWidget(self.lead)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.overall)
        layout.addWidget(self.stage_bar)
        layout.addWidget(self.stage)
        layout.addWidget(self.log_toggle)
        layout.addWidget(self.log)
        layout.addWidget(self.summary)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.open_button)
        row.addWidget(self.chat_button)
        row.addWidget(self.next_button)
        layout.addLayout(row)
        # Which checkpoint tensor went where: for whoever checks the conversion.
        mapping = QWidget()
        mapping_layout = QVBoxLayout(mapping)
        mapping_layout.setContentsMargins(0, 0, 0, 0)
        show = QHBoxLayout()
        show.addWidget(QLabel("Show"))
        show.addWidget(self.filter)
        show.addStretch(1)
        mapping_layout.addLayout(show)
        mapping_layout.addWidget(self.weights, 1)
        self.weights.setMinimumHeight(200)
        self.details = Details(mapping, "Details: the weight mapping")
        layout.addWidget(self.details)
        layout.addStretch(1)
        self.runner.progress.connect(self._on_progress)
        self.runner.succeeded.connect(self._on_result)
        self.runner.failed.connect(self._on_failed)
        self.runner.cancelled.connect(self._on_cancelled)
        self.runner.finished.connect(self._on_finished)
        state.source_changed.connect(self._on_source)
        state.profile_changed.connect(self._on_profile)
        self.dtype.currentTextChanged.connect(self._explain)
        self.target.currentTextChanged.connect(self._explain)
        self._report: list[tuple[str, str, str, str]] = []
        self._started = 0.0
        # The current stage, and when and where its rate was last measured from.
        self._stage_name = ""
        self._stage_since = (0.0, 0.0)
        self._downloaded = False
        self._out = ""  # the folder the running (or last) conversion writes
        self._explain()

    @Slot(str)
    def _on_source(self, source: str) -> None:
        if self.runner.running:
            return  # the running conversion keeps its page; the new model waits for it
        self.source.setText(source)
        name = Path(source.rstrip("/")).name.split("@")[0] or "model"
        self.output.setText(str(self.state.packages_folder() / f"{name}-onnx"))
        self._clear_result()

    def _clear_result(self) -> None:
        """Forget the previous run: its progress, "finished", summary and buttons."""
        self.overall.setValue(0)
        self.stage_bar.setRange(0, 1000)
        self.stage_bar.setValue(0)
        self.stage_bar.setFormat("%p%")
        self.stage.setText("")
        self.summary.setText("")
        self.log.clear()
        self._report = []
        self.weights.setRowCount(0)
        for button in (self.next_button, self.open_button, self.chat_button):
            button.setEnabled(False)

    @Slot()
    def _explain(self) -> None:
        """The plain sentence, the chosen precision and target in words."""
        dtype, ep = self.dtype.currentText(), self.target.currentText()
        sizes = self._profile.sizes if self._profile is not None else None
        self.dtype_words.setText(precision_words(dtype, sizes) if dtype else "")
        where = TARGETS.get(ep, ep)
        if ep == "cuda" and not self._has_gpu:
            where += " This computer has no GPU: the package is for another machine."
        self.target_words.setText(where)
        if self._profile is None:
            self.lead.setText("Converting makes a package this app and ONNX Runtime GenAI run.")
            return
        size = sizes.package_bytes.get(dtype) if sizes is not None else None
        how_big = f" of about {human_bytes(size)}" if size else ""
        runs = "an NVIDIA GPU" if ep == "cuda" else "a computer's processor (CPU)"
        family = getattr(self._profile, "family", "")
        self.lead.setText(
            f"Converting makes a {family} package{how_big} that runs on {runs}, offline."
        )

    @Slot(object)
    def _on_profile(self, profile: Profile) -> None:
        """Offer only the precisions this family converts to (LFM2-VL has no f16)."""
        sizes = profile.sizes.package_bytes
        offered = [d for d in DTYPES if d in sizes] or list(DTYPES)
        self.dtype.setToolTip(
            "f32: exact; f16: half the size; int8: the language part in 8 bits; int4: in 4 "
            "bits, smallest. Verify shows what the rounding changes."
        )
        current = self.dtype.currentText()
        self.dtype.clear()
        self.dtype.addItems(offered)
        self.dtype.setCurrentText(current if current in offered else offered[0])
        for i, d in enumerate(offered):
            words = precision_words(d, profile.sizes)
            self.dtype.setItemData(i, words, Qt.ItemDataRole.ToolTipRole)
        self._profile = profile
        self._explain()

    @Slot(bool)
    def _toggle_log(self, shown: bool) -> None:
        self.log.setVisible(shown)
        self.log_toggle.setText("Hide log" if shown else "Show log")

    @Slot()
    def browse(self) -> None:
        """Choose where the package goes."""
        folder = QFileDialog.getExistingDirectory(self, "Package folder")
        if folder:
            self.output.setText(folder)

    @Slot()
    def convert(self) -> None:
        """Start the conversion."""
        if not self.state.source:
            show_error(self, {"message": "No model picked", "hint": "Start on the Model page"})
            return
        if not self.output.text().strip():
            show_error(self, {"message": "No package folder", "hint": "Choose where it goes"})
            return
        if not self._confirm_fit() or not self._confirm_replace():
            return
        self.state.settings.setValue("dtype", self.dtype.currentText())
        self.state.settings.setValue("target", self.target.currentText())
        self.log.clear()
        self.overall.setValue(0)
        self.summary.setText("")
        self.weights.setRowCount(0)
        for button in (self.next_button, self.open_button, self.chat_button):
            button.setEnabled(False)
        self._started = time.monotonic()
        self._stage_name, self._downloaded = "", False
        self._out = self.output.text().strip()
        self._set_running(True)
        self.runner.start(
            "convert",
            {
                "source": self.state.source,
                "output": self._out,
                "dtype": self.dtype.currentText(),
                "ep": self.target.currentText(),
            },
        )

    def _confirm_fit(self) -> bool:
        """Warn (and ask) before a conversion this machine has no room for."""
        profile = self._profile
        if profile is None:
            return True
        machine = this_machine(Path(self.output.text().strip()))
        download = not Path(self.state.source).is_dir()
        problems = conversion_problems(profile.sizes, self.dtype.currentText(), machine, download)
        if not problems:
            return True
        return _ask(self, "It may not fit", " ".join(problems) + " Convert anyway?")

    def _confirm_replace(self) -> bool:
        """Converting over an existing package replaces it: ask first, naming a loaded one."""
        out = Path(self.output.text().strip())
        if not out.exists() or (out.is_dir() and not any(out.iterdir())):
            return True
        text = f"{out} already holds a package. Converting replaces it."
        loaded = self.state.loaded_package
        if loaded and same_package(loaded, str(out)):
            text += (
                " It is loaded in Chat: the chat loads the new package when you press "
                "Chat with it →."
            )
        return _ask(self, "Replace the package?", text + " Continue?")

    @Slot()
    def cancel(self) -> None:
        """Ask the conversion to stop; it leaves nothing behind."""
        self.stage.setText("Cancelling…")
        self.runner.cancel()

    def _set_running(self, running: bool) -> None:
        """While a conversion runs, its settings stay as they were started."""
        self.convert_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        for widget in (self.dtype, self.target, self.output, self.browse_button):
            widget.setEnabled(not running)

    @Slot(object)
    def _on_progress(self, p: Any) -> None:
        now = time.monotonic()
        index = STAGES.index(p.stage) if p.stage in STAGES else len(STAGES) - 1
        fraction = min(1.0, p.done / p.total) if p.total else 0.0
        self.overall.setValue(int((index + fraction) / len(STAGES) * 1000))
        if p.stage != self._stage_name:
            self._stage_name, self._stage_since = p.stage, (now, float(p.done))
        if p.total:
            self.stage_bar.setRange(0, 1000)
            self.stage_bar.setValue(int(fraction * 1000))
        else:
            self.stage_bar.setRange(0, 0)  # busy: the stage has no count
        self.stage_bar.setFormat(f"{p.stage}: %p%")
        self.stage.setText(self._stage_text(p, now))
        elapsed = now - self._started
        self.log.appendPlainText(f"[{elapsed:6.1f}s] {p.stage}: {p.message}")

    def _stage_text(self, p: Any, now: float) -> str:
        """What the stage is doing, with its rate and time left where it counts bytes."""
        if p.unit != "bytes" or not p.total:
            count = f" ({p.done:g} of {p.total:g} {p.unit})" if p.total else ""
            return f"{p.stage}: {p.message}{count}"
        if p.stage == "download" and p.done:
            self._downloaded = True
        since, done_then = self._stage_since
        seconds = now - since
        text = f"{p.stage}: {_amount(p.done, p.total)}"
        if seconds >= 0.5 and p.done > done_then:
            rate = (p.done - done_then) / seconds
            left = (p.total - p.done) / rate
            text += f" at {human_rate(rate)}, about {_duration(left)} left"
        return f"{text} — {p.message}" if p.message else text

    @Slot(object)
    def _on_result(self, manifest: Manifest) -> None:
        self.overall.setValue(1000)
        self.stage_bar.setRange(0, 1000)
        self.stage_bar.setValue(1000)
        self.stage_bar.setFormat("finished")
        out = self._out or self.output.text().strip()
        files = manifest.files
        w = manifest.weights
        esc = html.escape
        self.summary.setText(
            f"<b>{esc(manifest.family)}</b> → '{esc(manifest.pipeline_type)}' package "
            f"({esc(manifest.dtype)}, {esc(manifest.ep)}) in {esc(out)}<br>"
            f"{esc(' + '.join(manifest.components))}; {len(files)} files, "
            f"{sum(files.values()) / 1e6:.1f} MB; weights {esc(str(w.get('mapped')))} mapped, "
            f"{esc(str(w.get('unused')))} unused, 0 missing"
        )
        self.stage.setText("Done: ONNX Runtime GenAI loads the package and generates.")
        self._report = _weight_rows(Path(out) / "weights_report.json")
        self._fill_weights(self.filter.currentText())
        self.state.set_package(out)
        for button in (self.next_button, self.open_button, self.chat_button):
            button.setEnabled(True)

    @Slot(str)
    def _fill_weights(self, which: str) -> None:
        rows = [r for r in self._report if which == "all" or r[1] == which]
        self.weights.setRowCount(len(rows))
        for i, cells in enumerate(rows):
            for j, text in enumerate(cells):
                self.weights.setItem(i, j, QTableWidgetItem(text))

    @Slot(dict)
    def _on_failed(self, error: dict[str, Any]) -> None:
        self.stage.setText(for_display(f"Failed: {error.get('message')}", 500))
        self.log.appendPlainText(f"error: {error.get('message')}")
        show_error(self, error)

    @Slot()
    def _on_cancelled(self) -> None:
        text = "Cancelled: nothing was written, an earlier package is untouched."
        if self._downloaded:
            text += (
                " What was downloaded stays in the Hugging Face cache: converting again "
                "resumes the download where it stopped."
            )
        self.stage.setText(text)
        self.overall.setValue(0)
        self.stage_bar.setRange(0, 1000)
        self.stage_bar.setValue(0)

    @Slot()
    def _on_finished(self) -> None:
        self._set_running(False)

    @Slot()
    def _open_folder(self) -> None:
        """Show the package folder in the system's file manager."""
        from PySide6.QtCore import QUrl
        from PySide6.QtGui import QDesktopServices

        QDesktopServices.openUrl(QUrl.fromLocalFile(self.output.text().strip()))


def _beside(widget: QWidget, words: QLabel) -> QHBoxLayout:
    """A choice with its meaning in words to its right."""
    row = QHBoxLayout()
    row.addWidget(widget)
    row.addWidget(words, 1)
    return row


def _ask(parent: QWidget, title: str, text: str) -> bool:
    """A Yes/Cancel question; Cancel is the default."""
    answer = QMessageBox.question(
        parent,
        title,
        as_html(text),  # it names folders: shown as text
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
        QMessageBox.StandardButton.Cancel,
    )
    return answer == QMessageBox.StandardButton.Yes


def _amount(done: float, total: float) -> str:
    """'4.0 of 12.8 MB', or in GB once the total reaches one."""
    if total >= 1e9:
        return f"{done / 1e9:.2f} of {total / 1e9:.2f} GB"
    return f"{done / 1e6:.1f} of {total / 1e6:.1f} MB"


def _duration(seconds: float) -> str:
    """A time left in words a person reads at a glance."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _weight_rows(path: Path) -> list[tuple[str, str, str, str]]:
    """(tensor, status, initializers, shape) rows of a package's weights_report.json."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    rows = []
    for key, status in (
        ("mapped", "mapped"),
        ("unused", "unused"),
        ("missing", "missing"),
        ("mismatched", "shape mismatch"),
    ):
        for entry in report.get(key, []):
            name = str(entry.get("checkpoint") or entry.get("initializer") or entry.get("name", ""))
            targets = ", ".join(
                str(t) for t in entry.get("targets", []) or [entry.get("initializer", "")]
            )
            rows.append((name, status, targets, str(entry.get("shape", ""))))
    return rows
