"""Convert page: dtype and target, per-stage progress, Cancel, the manifest and weights."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend.convert import Manifest
from mmforge.backend.inspect import Profile
from mmforge.gui.bridge import JobRunner
from mmforge.gui.errors import show_error
from mmforge.gui.state import AppState

DTYPES = ("f32", "f16", "int4")
STAGES = ("download", "inspect", "build", "weights", "write", "quantize", "package", "validate")
FILTERS = ("all", "mapped", "unused", "missing", "shape mismatch")


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
        self.source = QLabel("No model picked yet: start on the Model page.")
        self.dtype = QComboBox()
        self.dtype.addItems(list(DTYPES))
        self.dtype.setCurrentText(str(state.settings.value("dtype", "f32")))
        self.target = QComboBox()
        self.target.addItems(["cpu", "cuda"])
        self.target.setCurrentText(str(state.settings.value("target", "cpu")))
        self.output = QLineEdit()
        self.output.setObjectName("outputEdit")
        browse = QPushButton("Choose…")
        browse.clicked.connect(self.browse)
        out_row = QHBoxLayout()
        out_row.addWidget(self.output, 1)
        out_row.addWidget(browse)
        form = QFormLayout()
        form.addRow("Model", self.source)
        form.addRow("Precision", self.dtype)
        form.addRow("Target", self.target)
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
        self.stage = QLabel("")
        self.log_toggle = QPushButton("Show log")
        self.log_toggle.setCheckable(True)
        self.log = QPlainTextEdit(readOnly=True)
        self.log.setVisible(False)
        self.log_toggle.toggled.connect(self._toggle_log)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.filter = QComboBox()
        self.filter.addItems(FILTERS)
        self.filter.currentTextChanged.connect(self._fill_weights)
        self.weights = QTableWidget(0, 4)
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
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.overall)
        layout.addWidget(self.stage)
        layout.addWidget(self.log_toggle)
        layout.addWidget(self.log)
        layout.addWidget(self.summary)
        row = QHBoxLayout()
        row.addWidget(QLabel("Weight mapping"))
        row.addWidget(self.filter)
        row.addStretch(1)
        row.addWidget(self.open_button)
        row.addWidget(self.chat_button)
        row.addWidget(self.next_button)
        layout.addLayout(row)
        layout.addWidget(self.weights, 1)
        self.runner.progress.connect(self._on_progress)
        self.runner.succeeded.connect(self._on_result)
        self.runner.failed.connect(self._on_failed)
        self.runner.cancelled.connect(self._on_cancelled)
        self.runner.finished.connect(self._on_finished)
        state.source_changed.connect(self._on_source)
        state.profile_changed.connect(self._on_profile)
        self._report: list[tuple[str, str, str, str]] = []
        self._started = 0.0

    @Slot(str)
    def _on_source(self, source: str) -> None:
        self.source.setText(source)
        name = Path(source.rstrip("/")).name.split("@")[0] or "model"
        self.output.setText(str(self.state.packages_folder() / f"{name}-onnx"))

    @Slot(object)
    def _on_profile(self, profile: Profile) -> None:
        """Offer only the precisions this family converts to (LFM2-VL has no f16)."""
        sizes = profile.sizes.package_bytes
        offered = [d for d in DTYPES if d in sizes] or list(DTYPES)
        current = self.dtype.currentText()
        self.dtype.clear()
        self.dtype.addItems(offered)
        self.dtype.setCurrentText(current if current in offered else offered[0])

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
        self.state.settings.setValue("dtype", self.dtype.currentText())
        self.state.settings.setValue("target", self.target.currentText())
        self.log.clear()
        self.overall.setValue(0)
        self.summary.setText("")
        self.weights.setRowCount(0)
        for button in (self.next_button, self.open_button, self.chat_button):
            button.setEnabled(False)
        self._started = time.monotonic()
        self._set_running(True)
        self.runner.start(
            "convert",
            {
                "source": self.state.source,
                "output": self.output.text().strip(),
                "dtype": self.dtype.currentText(),
                "ep": self.target.currentText(),
            },
        )

    @Slot()
    def cancel(self) -> None:
        """Ask the conversion to stop; it leaves nothing behind."""
        self.stage.setText("Cancelling…")
        self.runner.cancel()

    def _set_running(self, running: bool) -> None:
        self.convert_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)

    @Slot(object)
    def _on_progress(self, p: Any) -> None:
        index = STAGES.index(p.stage) if p.stage in STAGES else len(STAGES) - 1
        fraction = (p.done / p.total) if p.total else 0.0
        overall = (index + min(1.0, fraction)) / len(STAGES)
        self.overall.setValue(int(overall * 1000))
        text = f"{p.stage}: {p.message}"
        if p.unit == "bytes" and p.total:
            text = f"{p.stage}: {p.done / 1e6:.1f} of {p.total / 1e6:.1f} MB {p.message}"
        elapsed = time.monotonic() - self._started
        if overall > 0.05:
            text += f"  (about {elapsed / overall - elapsed:.0f} s left)"
        self.stage.setText(text)
        self.log.appendPlainText(f"[{elapsed:6.1f}s] {p.stage}: {p.message}")

    @Slot(object)
    def _on_result(self, manifest: Manifest) -> None:
        self.overall.setValue(1000)
        out = self.output.text().strip()
        files = manifest.files
        w = manifest.weights
        self.summary.setText(
            f"<b>{manifest.family}</b> → '{manifest.pipeline_type}' package "
            f"({manifest.dtype}, {manifest.ep}) in {out}<br>"
            f"{' + '.join(manifest.components)}; {len(files)} files, "
            f"{sum(files.values()) / 1e6:.1f} MB; weights {w.get('mapped')} mapped, "
            f"{w.get('unused')} unused, 0 missing"
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
        self.stage.setText(f"Failed: {error.get('message')}")
        self.log.appendPlainText(f"error: {error.get('message')}")
        show_error(self, error)

    @Slot()
    def _on_cancelled(self) -> None:
        self.stage.setText("Cancelled: nothing was written, an earlier package is untouched.")
        self.overall.setValue(0)

    @Slot()
    def _on_finished(self) -> None:
        self._set_running(False)

    @Slot()
    def _open_folder(self) -> None:
        """Show the package folder in the system's file manager."""
        from PySide6.QtCore import QUrl
        from PySide6.QtGui import QDesktopServices

        QDesktopServices.openUrl(QUrl.fromLocalFile(self.output.text().strip()))


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
