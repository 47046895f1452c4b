"""Verify page: stage-by-stage parity with badges, the first divergent stage, a plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, Signal, Slot
from PySide6.QtGui import QColor
from PySide6.QtSvgWidgets import QSvgWidget
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend.verify import VerifyReport
from mmforge.gui.bridge import JobRunner
from mmforge.gui.errors import show_error
from mmforge.gui.state import AppState

COLOURS = {"PASS": "#1a7f37", "AMBIGUOUS": "#9a6700", "FAIL": "#cf222e"}


class VerifyView(QWidget):
    """Run `verify` in a worker and show its report.

    Signals:
        chat_requested(): go on to Chat.
    """

    chat_requested = Signal()

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.runner = JobRunner(self)
        self.package = QLineEdit(state.package)
        self.reference = QLineEdit(state.source)
        self.probe = QCheckBox("Use the built-in probe image and audio clip")
        self.probe.setChecked(True)
        self.image = QLineEdit(placeholderText="image file (when the probe is off)")
        self.audio = QLineEdit(placeholderText="audio file, optional")
        pick = QPushButton("Choose…")
        pick.clicked.connect(self.pick_files)
        self.tokens = QSpinBox(minimum=1, maximum=512, value=32)
        form = QFormLayout()
        form.addRow("Package", self.package)
        form.addRow("Reference", self.reference)
        form.addRow(self.probe)
        files = QHBoxLayout()
        files.addWidget(self.image, 1)
        files.addWidget(self.audio, 1)
        files.addWidget(pick)
        form.addRow("Inputs", files)
        form.addRow("Greedy tokens", self.tokens)
        self.run_button = QPushButton("Verify")
        self.run_button.setObjectName("verifyButton")
        self.run_button.clicked.connect(self.run)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.runner.cancel)
        self.export_json = QPushButton("Export JSON…")
        self.export_html = QPushButton("Export HTML…")
        for b in (self.export_json, self.export_html):
            b.setEnabled(False)
        self.export_json.clicked.connect(self._export_json)
        self.export_html.clicked.connect(self._export_html)
        self.next_button = QPushButton("Chat →")
        self.next_button.clicked.connect(self.chat_requested)
        buttons = QHBoxLayout()
        for b in (self.run_button, self.cancel_button, self.export_json, self.export_html):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.next_button)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.verdict = QLabel("")
        self.verdict.setObjectName("verdictLabel")
        self.verdict.setWordWrap(True)
        self.table = QTableWidget(0, 6)
        self.table.setObjectName("stageTable")
        self.table.setHorizontalHeaderLabels(
            ["stage", "verdict", "max abs diff", "cosine", "argmax", "why"]
        )
        self.table.horizontalHeader().setStretchLastSection(True)
        self.plot = QSvgWidget()
        self.plot.setMinimumHeight(240)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.progress)
        layout.addWidget(self.verdict)
        layout.addWidget(self.table, 1)
        layout.addWidget(
            QLabel(
                "Decoder prefill: each prompt position's largest logit difference from "
                "transformers, as a multiple of the tolerance (at most 1× passes)"
            )
        )
        layout.addWidget(self.plot)
        self.runner.progress.connect(self._on_progress)
        self.runner.succeeded.connect(self._on_result)
        self.runner.failed.connect(self._on_failed)
        self.runner.cancelled.connect(self._on_cancelled)
        self.runner.finished.connect(self._on_finished)
        state.package_changed.connect(self.package.setText)
        state.source_changed.connect(self.reference.setText)
        self.report: VerifyReport | None = None

    @Slot()
    def pick_files(self) -> None:
        """Choose an image and (optionally) an audio clip instead of the probes."""
        files, _ = QFileDialog.getOpenFileNames(
            self, "Inputs", "", "Images and audio (*.png *.jpg *.jpeg *.webp *.wav *.flac)"
        )
        for f in files:
            target = self.audio if f.lower().endswith((".wav", ".flac")) else self.image
            target.setText(f)
        if files:
            self.probe.setChecked(False)

    @Slot()
    def run(self) -> None:
        """Start verification."""
        args: dict[str, Any] = {
            "package": self.package.text().strip(),
            "reference": self.reference.text().strip(),
            "tokens": self.tokens.value(),
        }
        if not args["package"] or not args["reference"]:
            show_error(
                self,
                {"message": "Pick a package and its reference", "hint": "Convert a model first"},
            )
            return
        if not self.probe.isChecked():
            args["images"] = [self.image.text()] if self.image.text() else []
            args["audios"] = [self.audio.text()] if self.audio.text() else []
        self.table.setRowCount(0)
        self.verdict.setText("")
        self.progress.setValue(0)
        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.runner.start("verify", args)

    @Slot(object)
    def _on_progress(self, p: Any) -> None:
        if p.total:
            self.progress.setValue(int(100 * p.done / p.total))
        self.verdict.setText(p.message)

    @Slot(object)
    def _on_result(self, report: VerifyReport) -> None:
        from mmforge.backend.verify.report import plot_svg

        self.report = report
        self.progress.setValue(100)
        components = report.components
        self.table.setRowCount(len(components))
        first = report.first_divergent_stage
        for i, c in enumerate(components):
            cells = (
                c.name,
                c.verdict,
                "—" if c.max_abs_diff is None else f"{c.max_abs_diff:.2e}",
                f"{c.cosine:.6f}",
                "—" if c.argmax_match is None else ("yes" if c.argmax_match else "no"),
                c.reason,
            )
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if j == 1:
                    item.setForeground(QColor("white"))
                    item.setBackground(QColor(COLOURS.get(c.verdict, "#57606a")))
                elif c.name == first:
                    item.setBackground(QColor("#fff8c5"))
                self.table.setItem(i, j, item)
        self.table.resizeColumnsToContents()
        tokens = report.tokens
        text = (
            f"<b style='color:{COLOURS[report.verdict]}'>{report.verdict}</b> — "
            f"{tokens.get('matched')} of {tokens.get('total')} greedy tokens identical."
        )
        if first:
            text += f"<br><b>First divergent stage: {first}.</b> {report.cause or ''}"
        self.verdict.setText(text)
        prefill = next((c for c in components if c.name == "decoder_prefill"), None)
        svg = plot_svg(prefill.per_position_excess if prefill else [])
        self.plot.load(QByteArray(svg.encode("utf-8")))
        self.export_json.setEnabled(True)
        self.export_html.setEnabled(True)

    def _save(self, title: str, pattern: str, text: str) -> None:
        path, _ = QFileDialog.getSaveFileName(self, title, "", pattern)
        if path:
            try:
                Path(path).write_text(text, encoding="utf-8")
            except OSError as e:
                show_error(self, {"message": f"Cannot write {path}: {e.strerror}"})

    @Slot()
    def _export_json(self) -> None:
        if self.report is not None:
            self._save("Export JSON", "JSON (*.json)", json.dumps(self.report.to_dict(), indent=2))

    @Slot()
    def _export_html(self) -> None:
        from mmforge.backend.verify.report import render_html

        if self.report is not None:
            self._save("Export HTML", "HTML (*.html)", render_html(self.report))

    @Slot(dict)
    def _on_failed(self, error: dict[str, Any]) -> None:
        self.verdict.setText(f"Could not verify: {error.get('message')}")
        show_error(self, error)

    @Slot()
    def _on_cancelled(self) -> None:
        self.verdict.setText("Cancelled.")

    @Slot()
    def _on_finished(self) -> None:
        self.run_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
