"""Verify page: stage-by-stage parity with badges, the first divergent stage, a plot."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QEvent, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QColor, QResizeEvent
from PySide6.QtSvgWidgets import QSvgWidget
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend.attachments import AUDIO, kind_of
from mmforge.backend.library import PackageEntry, hears, packages
from mmforge.backend.verify import VerifyReport
from mmforge.gui.bridge import JobRunner
from mmforge.gui.chat_attachments import FILE_TYPES, PICTURE_TYPES
from mmforge.gui.details import Details
from mmforge.gui.errors import show_error
from mmforge.gui.package_bar import library_label
from mmforge.gui.safe_text import as_html, for_display, plain_label
from mmforge.gui.state import AppState
from mmforge.gui.theme import Colours, colours

# What each stage is, for a person who does not know the pipeline's parts.
STAGES = {
    "runtime_config": "the package's runtime settings",
    "preprocessing": "the image and audio preprocessing",
    "vision_encoder": "the image encoder",
    "audio_encoder": "the audio encoder",
    "embedding": "the step that mixes image features into the text",
    "embedding_per_layer": "the per-layer inputs",
    "embedding_text_only": "the text embedding",
    "decoder_prefill": "the language model reading the prompt",
    "decoder_step": "the language model writing its answer",
    "end_to_end": "the whole answer",
}


EMPTY_SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>'
# The checker's steps, as its worker reports them (backend/verify/job.py, step of 4).
STEPS = 4


class Chart(QSvgWidget):
    """The prefill plot, drawn at the widget's own size: its text stays 11-12 px.

    A fixed 720×240 drawing scaled to a short, wide widget (1024×600) had its text
    squeezed tiny and stretched sideways.
    """

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._excess: list[float] = []
        self._colour = "black"

    def show_values(self, excess: list[float], colour: str) -> None:
        """Plot these per-position multiples of the tolerance, text in `colour`."""
        self._excess, self._colour = list(excess), colour
        self._draw()

    def _draw(self) -> None:
        from mmforge.backend.verify.report import plot_svg

        width, height = max(self.width(), 320), max(self.height(), 120)
        svg = plot_svg(self._excess, width, height) if self._excess else EMPTY_SVG
        self.load(QByteArray(svg.replace("currentColor", self._colour).encode("utf-8")))

    def resizeEvent(self, event: QResizeEvent) -> None:
        """Draw again at the new size rather than stretch the old drawing."""
        super().resizeEvent(event)
        if self._excess:
            self._draw()


def verdict_colour(verdict: str, c: Colours) -> str:
    """The colour a verdict is shown in."""
    colours = {"PASS": c.ok, "AMBIGUOUS": c.warn, "APPROXIMATE": c.warn, "FAIL": c.bad}
    return colours.get(verdict, c.muted)


def summary_html(report: VerifyReport, c: Colours) -> str:
    """The parity summary card: the verdict and what it means, in plain words."""
    tokens = report.tokens
    matched, total = tokens.get("matched"), tokens.get("total")
    colour = verdict_colour(report.verdict, c)
    first = report.first_divergent_stage
    cost = report.rounding
    answer = _answer_words(matched, total)
    if report.verdict == "PASS" and cost is not None:
        # Two separate facts: the conversion is right, and the precision has its own cost.
        if report.dtype == "f16":
            right = (
                "The conversion is right: this f16 package computes what the original "
                "model computes, within float16 arithmetic's bounds"
            )
        else:
            right = (
                f"The conversion is exact: this {report.dtype} package computes exactly what "
                f"the original computes with {report.dtype} weights"
            )
        meaning = (
            f"{right} ({answer}). Making the weights smaller has its own cost, which no "
            f"conversion avoids: on this prompt {report.dtype} changes "
            f"{1 - cost.top1_agreement:.0%} of the next words the model picks."
        )
    elif report.verdict == "PASS":
        meaning = (
            f"The converted model computes what the original computes at every step ({answer})."
        )
    elif report.verdict == "APPROXIMATE":
        meaning = (
            "Every part of the converted model computes what the original computes when "
            f"transformers is run with the approximation you accepted ({answer}). That is "
            f"not the model as released. {report.approximation or 'The Model card says how.'}"
        )
    elif report.verdict == "AMBIGUOUS":
        meaning = (
            f"The check could not decide. Every step it could compare is shown below ({answer})."
        )
    else:
        meaning = f"The converted model differs from the original ({answer})."
    where = ""
    if first:
        what = STAGES.get(first, first)
        where = (
            f"<p><b>It first differs in {html.escape(what)}</b> ({html.escape(first)}).<br>"
            f"{html.escape(report.cause or '')}</p>"
        )
    quality = ""
    if report.verdict == "PASS" and cost is not None:
        # A green PASS beside "quality: poor" read as "all is well": the verdict is the
        # conversion's, the quality the precision's, and each gets its own headline.
        shade = {"good": c.ok, "fair": c.warn}.get(cost.grade, c.bad)
        quality = (
            f"<p><span style='font-size:large;font-weight:bold;color:{shade}'>"
            f"Quality at {html.escape(report.dtype)}: {html.escape(cost.grade)}</span></p>"
        )
    return (
        f"<table width='100%' cellpadding='10'><tr><td bgcolor='{c.model_bubble}'>"
        f"<p><span style='font-size:x-large;font-weight:bold;color:{colour}'>"
        f"{html.escape(report.verdict)}</span>&nbsp;&nbsp;{html.escape(meaning)}</p>"
        f"{quality}{where}</td></tr></table>"
    )


def _answer_words(matched: object, total: object) -> str:
    """How much of the answer is the same, in words (a token is a word or part of one)."""
    if not isinstance(matched, int) or not isinstance(total, int) or total <= 0:
        return "no answer was compared"
    if matched == total:
        return f"all {total} word pieces of the answer are the same"
    return f"{matched} of the {total} word pieces of the answer are the same"


class VerifyView(QWidget):
    """Run `verify` in a worker and show its report.

    Signals:
        chat_requested(): go on to Chat.
    """

    chat_requested = Signal()

    def __init__(self, state: AppState, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.report: VerifyReport | None = None
        self.runner = JobRunner(self)
        self.package = QLineEdit(state.package)
        self.package.setAccessibleName("Package folder")
        self.package.editingFinished.connect(self._package_typed)
        # The library, as on the Chat page: picking a package pairs it with its model.
        self.library = QComboBox()
        self.library.setObjectName("verifyLibrary")
        self.library.setAccessibleName("Packages in the library")
        self.library.setToolTip("Converted packages in the library, with the model of each")
        self.library.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.library.setMinimumContentsLength(14)
        self.library.activated.connect(self._pick_library)
        self.choose_package_button = QPushButton("Choose…")
        self.choose_package_button.setToolTip("Pick a package folder outside the library")
        self.choose_package_button.clicked.connect(self.choose_package)
        self.reference = QLineEdit(state.reference)
        self.reference.setAccessibleName("Reference model")
        self.reference.setToolTip("The model the package was converted from (its manifest says)")
        self.reference.editingFinished.connect(self._reference_typed)
        self._entries: list[PackageEntry] = []
        self._pair: tuple[str, str] | None = None  # what the running check compares
        self.probe = QCheckBox("Use the built-in probe image and audio clip")
        self.probe.setChecked(True)
        self.image = QLineEdit(placeholderText="image file (when the probe is off)")
        self.image.setAccessibleName("Image file")
        self.audio = QLineEdit(placeholderText="audio file, optional")
        self.audio.setAccessibleName("Audio file")
        pick = QPushButton("Choose…")
        pick.clicked.connect(self.pick_files)
        self.tokens = QSpinBox(minimum=1, maximum=512, value=32)
        self.tokens.setSuffix(" word pieces at most")
        self.tokens.setAccessibleName("Answer length")
        self.tokens.setToolTip(
            "How much of the answer both models write and compare, in word pieces (tokens); "
            "an answer that ends sooner is compared whole"
        )
        self.tokens.setMaximumWidth(220)
        form = QFormLayout()
        package_row = QHBoxLayout()
        package_row.addWidget(self.package, 1)
        package_row.addWidget(self.library)
        package_row.addWidget(self.choose_package_button)
        form.addRow("Package", package_row)
        form.addRow("Reference", self.reference)
        form.addRow(self.probe)
        files = QHBoxLayout()
        files.addWidget(self.image, 1)
        files.addWidget(self.audio, 1)
        files.addWidget(pick)
        form.addRow("Inputs", files)
        form.addRow("Answer length", self.tokens)
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
        self.progress.setFormat("Not started")
        self.verdict = QLabel("")
        self.verdict.setObjectName("verdictLabel")
        self.verdict.setWordWrap(True)
        # Rich for the summary card; progress and errors go in escaped (`as_html`).
        self.verdict.setTextFormat(Qt.TextFormat.RichText)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = QTableWidget(0, 6)
        self.table.setObjectName("stageTable")
        self.table.setAccessibleName("Parity of each stage")
        self.table.setHorizontalHeaderLabels(
            ["stage", "verdict", "max abs diff", "cosine", "argmax", "why"]
        )
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setWordWrap(True)
        self.table.verticalHeader().setVisible(False)
        self.plot = Chart()
        self.plot.setMinimumHeight(140)
        self.plot.setAccessibleName("Prefill difference per prompt position")
        plot_box = QWidget()
        plot_layout = QVBoxLayout(plot_box)
        plot_layout.setContentsMargins(0, 0, 0, 0)
        plot_layout.addWidget(
            QLabel(
                "Decoder prefill: each prompt position's largest logit difference from "
                "transformers, as a multiple of the tolerance (at most 1× passes)",
                wordWrap=True,
            )
        )
        plot_layout.addWidget(self.plot, 1)
        # The splitter may not squeeze the plot under its caption and least height: at
        # 1024×600 it did, and the axis title below the plot was cut off.
        plot_box.setMinimumHeight(self.plot.minimumHeight() + 3 * plot_box.fontMetrics().height())
        # The table and the plot share what the form leaves; the user moves the divider.
        self.results = QSplitter(Qt.Orientation.Vertical)
        self.results.addWidget(self.table)
        self.results.addWidget(plot_box)
        self.results.setStretchFactor(0, 3)
        self.results.setStretchFactor(1, 2)
        self.results.setChildrenCollapsible(False)
        # The numbers (max abs diff, cosine, argmax, the plot) are for whoever checks them.
        self.results.setMinimumHeight(320)
        self.details = Details(self.results, "Details: each stage's numbers")
        self.lead = plain_label(
            "Verify checks that the converted package answers like the original model: "
            "both read the same picture and prompt, and every step is compared.",
            wrap=True,
        )
        self.lead.setObjectName("verifyLead")
        layout = QVBoxLayout(self)
        layout.addWidget(self.lead)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.progress)
        layout.addWidget(self.verdict)
        layout.addWidget(self.details)
        layout.addStretch(1)
        self.runner.progress.connect(self._on_progress)
        self.runner.succeeded.connect(self._on_result)
        self.runner.failed.connect(self._on_failed)
        self.runner.cancelled.connect(self._on_cancelled)
        self.runner.finished.connect(self._on_finished)
        # The pair is the selection's (gui/selection.py): another model, package or
        # reference there changes it here, and puts away the report of the old pair.
        state.changed.connect(self._on_selection)
        state.library_changed.connect(self.refresh_library)
        self.refresh_library()
        self._name_probes()

    @Slot(object)
    def _on_selection(self, fields: frozenset[str]) -> None:
        selection = self.state.selection
        if "package" in fields:
            self.package.setText(selection.package)
            self.refresh_library()
            self._name_probes()
        if "reference" in fields:
            self.reference.setText(selection.reference)
        if "verified" in fields and selection.verified is None and not self.runner.running:
            self._clear_report()

    def _name_probes(self) -> None:
        """The probe checkbox and file fields name what the chosen package takes."""
        package = self.package.text().strip()
        sound = not package or hears(package)  # no package yet: both, as before
        self.probe.setText(
            "Use the built-in probe image and audio clip"
            if sound
            else "Use the built-in probe image"
        )
        self.audio.setVisible(sound)
        if not sound:
            self.audio.clear()  # a clip chosen for another package is not sent to this one

    def _clear_report(self) -> None:
        """Forget the last check: it was of another package or reference."""
        self.report = None
        self.table.setRowCount(0)
        self.verdict.setText("")
        self.plot.show_values([], "black")
        self.progress.setValue(0)
        self.progress.setFormat("Not started")
        for b in (self.export_json, self.export_html):
            b.setEnabled(False)

    @Slot()
    def refresh_library(self) -> None:
        """List the library's packages, each with the model it was converted from."""
        extra = [Path(self.state.package)] if self.state.package else []
        try:
            self._entries = packages(self.state.packages_folder(), extra)
        except OSError:
            self._entries = []
        self.library.clear()
        self.library.addItem(f"Library ({len(self._entries)})")
        for e in self._entries:
            self.library.addItem(library_label(e.folder.name, e.family, e.dtype))
            tip = as_html(f"{e.folder}\nconverted from {e.source}")
            self.library.setItemData(self.library.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)

    @Slot(int)
    def _pick_library(self, index: int) -> None:
        self.library.setCurrentIndex(0)
        if 0 < index <= len(self._entries):
            self.state.set_package(str(self._entries[index - 1].folder))

    @Slot()
    def choose_package(self) -> None:
        """Pick a package folder (the dialog opens in the library)."""
        start = self.state.packages_folder()
        where = str(start) if start.is_dir() else ""
        folder = QFileDialog.getExistingDirectory(self, "Package to verify", where)
        if folder:
            self.state.set_package(folder)

    @Slot()
    def _package_typed(self) -> None:
        typed = self.package.text().strip()
        if typed != self.state.package:
            self.state.set_package(typed)

    @Slot()
    def _reference_typed(self) -> None:
        typed = self.reference.text().strip()
        if typed != self.state.reference:
            self.state.selection.set_reference(typed)

    @Slot()
    def pick_files(self) -> None:
        """Choose an image and (optionally) an audio clip instead of the probes."""
        types = FILE_TYPES if self.audio.isVisibleTo(self) else PICTURE_TYPES
        files, _ = QFileDialog.getOpenFileNames(self, "Inputs", "", types)
        for f in files:
            target = self.audio if kind_of(Path(f)) == AUDIO else self.image
            target.setText(f)
        if files:
            self.probe.setChecked(False)

    @Slot()
    def run(self) -> None:
        """Start verification."""
        self._package_typed()  # what the fields say is the pair (a path typed, no Enter)
        self._reference_typed()
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
        self._clear_report()
        self._pair = (self.state.package, self.state.reference)
        # Named from the start: the worker's first report comes once it has started.
        self.progress.setFormat(f"Step 1 of {STEPS + 1}: starting the checker… %p%")
        self.progress.setValue(1)
        self.verdict.setText(
            as_html("Starting the checker: it loads the package and the original model.")
        )
        self._set_running(True)
        self.runner.start("verify", args)

    def _set_running(self, running: bool) -> None:
        """While a check runs, its package and reference stay as they were started."""
        self.run_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        for widget in (self.package, self.library, self.choose_package_button, self.reference):
            widget.setEnabled(not running)

    @Slot(object)
    def _on_progress(self, p: Any) -> None:
        if p.total:
            self.progress.setValue(max(1, int(100 * p.done / p.total)))
            step = min(int(p.done) + 2, STEPS + 1)
            what = for_display(p.message, 80).replace("%", "%%")
            self.progress.setFormat(f"Step {step} of {STEPS + 1}: {what} %p%")
        self.verdict.setText(as_html(for_display(p.message, 500)))

    @Slot(object)
    def _on_result(self, report: VerifyReport) -> None:
        pair = (self.state.package, self.state.reference)
        if self._pair is not None and self._pair != pair:
            self.verdict.setText(
                as_html("The package or reference changed while checking: press Verify again.")
            )
            return
        self.report = report
        self.state.selection.set_verified(report)
        self.progress.setValue(100)
        self.progress.setFormat("Done")
        self._draw_report()
        self.export_json.setEnabled(True)
        self.export_html.setEnabled(True)

    def _draw_report(self) -> None:
        """The summary card, the stage table and the plot, in the palette's colours."""
        report = self.report
        if report is None:
            return
        c = colours(self.palette())
        components = report.components
        self.table.setRowCount(len(components))
        first = report.first_divergent_stage
        for i, comp in enumerate(components):
            cells = (
                comp.name,
                comp.verdict,
                "—" if comp.max_abs_diff is None else f"{comp.max_abs_diff:.2e}",
                f"{comp.cosine:.6f}",
                "—" if comp.argmax_match is None else ("yes" if comp.argmax_match else "no"),
                comp.reason,
            )
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text if j == 5 else STAGES.get(comp.name, ""))
                if j == 1:
                    # The dark palette's bright accents need dark letters (white: 2.5:1).
                    item.setForeground(QColor("#0d1117" if c.dark else "white"))
                    item.setBackground(QColor(verdict_colour(comp.verdict, c)))
                elif comp.name == first:
                    item.setBackground(QColor(c.note))
                self.table.setItem(i, j, item)
        self.table.resizeColumnsToContents()
        header = self.table.horizontalHeader()
        header.resizeSection(5, max(200, self.table.viewport().width() - header.sectionPosition(5)))
        self.table.resizeRowsToContents()
        self.verdict.setText(summary_html(report, c))
        QTimer.singleShot(0, self._fit_table)  # once the layout has made room for the card
        prefill = next((comp for comp in components if comp.name == "decoder_prefill"), None)
        self.plot.show_values(prefill.per_position_excess if prefill else [], c.text)

    def _fit_table(self) -> None:
        """Give the table the height of all its rows; the plot takes what is left."""
        table = self.table
        rows = sum(table.rowHeight(i) for i in range(table.rowCount()))
        wanted = rows + table.horizontalHeader().height() + 2 * table.frameWidth() + 2
        total = sum(self.results.sizes())
        if total > 0:
            plot = max(self.plot.minimumHeight() + 24, total - wanted)
            self.results.setSizes([total - plot, plot])

    def changeEvent(self, event: QEvent) -> None:
        """Redraw the report in the new colours when the palette changes."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._draw_report()

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
        message = for_display(f"Could not verify: {error.get('message')}", 500)
        self.verdict.setText(as_html(message))
        show_error(self, error)

    @Slot()
    def _on_cancelled(self) -> None:
        self.verdict.setText("Cancelled.")
        self.progress.setFormat("Cancelled")

    @Slot()
    def _on_finished(self) -> None:
        self._set_running(False)
        self._pair = None
