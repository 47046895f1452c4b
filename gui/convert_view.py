"""Convert page: the form (precision, target, folder), Convert and Cancel.

Its progress is `convert_progress`, and what a finished conversion made `convert_result`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from mmforge.backend import precisions
from mmforge.backend.convert import Manifest
from mmforge.backend.inspect import Profile
from mmforge.backend.units import a_or_an, human_bytes
from mmforge.backend.vocabulary import EPS
from mmforge.gui import consent
from mmforge.gui.bridge import JobRunner
from mmforge.gui.chat_turns import same_package
from mmforge.gui.convert_progress import ConvertProgress
from mmforge.gui.convert_result import ConvertResult
from mmforge.gui.errors import show_error
from mmforge.gui.fit import (
    CPU_CUDA,
    conversion_problems,
    has_gpu,
    precision_words,
    this_machine,
)
from mmforge.gui.safe_text import as_html, plain_label
from mmforge.gui.selection import Converted
from mmforge.gui.state import AppState

DTYPES = precisions.DTYPES
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
        self.dtype.setCurrentText(state.selection.dtype)
        self.target = QComboBox()
        self.target.addItems(list(EPS))
        self.target.setCurrentText(state.selection.target)
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
        self.progress = ConvertProgress()
        self.result = ConvertResult()
        self.result.verify_requested.connect(self.verify_requested)
        self.result.chat_requested.connect(self.chat_requested)
        self.result.open_requested.connect(self._open_folder)
        # The parts tests and the window reach by name.
        self.overall, self.stage_bar = self.progress.overall, self.progress.stage_bar
        self.stage, self.log = self.progress.stage, self.progress.log
        self.summary, self.weights = self.result.summary, self.result.weights
        self.filter, self.details = self.result.filter, self.result.details
        self.next_button, self.open_button = self.result.next_button, self.result.open_button
        self.chat_button = self.result.chat_button
        layout = QVBoxLayout(self)
        layout.addWidget(self.lead)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.progress)
        layout.addWidget(self.result)
        layout.addStretch(1)
        self.runner.progress.connect(self._on_progress)
        self.runner.succeeded.connect(self._on_result)
        self.runner.failed.connect(self._on_failed)
        self.runner.cancelled.connect(self._on_cancelled)
        self.runner.finished.connect(self._on_finished)
        state.source_changed.connect(self._on_source)
        state.profile_changed.connect(self._on_profile)
        state.changed.connect(self._on_selection)
        self.dtype.currentTextChanged.connect(self._explain)
        self.target.currentTextChanged.connect(self._explain)
        self._name = ""  # the picked model's name, for the default package folder
        self._offered = ""  # the default folder last put in the field
        self.dtype.currentTextChanged.connect(self._follow_choice)
        self.target.currentTextChanged.connect(self._follow_choice)
        self._refilling = False  # the precisions are being listed again: no choice made
        self._out = ""  # the folder the running (or last) conversion writes
        self._run: tuple[str, str, str] = ("", "", "")  # its source, precision, target
        # A saved precision this page does not offer (a hand-edited settings file) gives way
        # to the one shown.
        state.selection.set_precision(self.dtype.currentText(), self.target.currentText())
        self._explain()

    @Slot(str)
    def _on_source(self, source: str) -> None:
        if self.runner.running:
            return  # the running conversion keeps its page; the new model waits for it
        self.source.setText(source)
        self._name = Path(source.rstrip("/")).name.split("@")[0] or "model"
        self._offer_default()
        self._clear_result()

    @Slot(object)
    def _on_selection(self, fields: frozenset[str]) -> None:
        """The finished result goes when the choice it was made from does."""
        converted = self.state.selection.converted
        if "converted" in fields and converted is None and not self.runner.running:
            self._clear_result()

    def _default_output(self) -> str:
        """The packages folder's entry for this model at the chosen precision and target.

        One folder per precision (and per target), so that converting at a second
        precision adds a package beside the first, as Compare needs, instead of replacing
        it.
        """
        target = self.target.currentText()
        suffix = self.dtype.currentText() + ("-cuda" if target == "cuda" else "")
        return str(self.state.packages_folder() / f"{self._name}-{suffix}")

    def _offer_default(self) -> None:
        self._offered = self._default_output()
        self.output.setText(self._offered)

    @Slot()
    def _follow_choice(self) -> None:
        """A default folder follows the precision and target; one the user typed stays.

        The last run's "finished … at f32" goes too: it said f32 after int4 was chosen
        (the package it made stays in the library).
        """
        if self._name and self.output.text() == self._offered:
            self._offer_default()
        if self._refilling or self.runner.running:
            return
        # The selection clears the finished result (and this page with it, _on_selection).
        self.state.selection.set_precision(self.dtype.currentText(), self.target.currentText())

    def _clear_result(self) -> None:
        """Forget the previous run: its progress, "finished", summary and buttons."""
        self.progress.clear()
        self.result.clear()

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
        text = f"Converting makes {a_or_an(family)} package{how_big} that runs on {runs}, offline."
        differs = getattr(self._profile, "approximation", "")
        if differs:
            text += (
                f" It will be an approximation of the model as released ({differs}), as the "
                "Model card says: you are asked before it starts."
            )
        self.lead.setText(text)

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
        self._refilling = True
        try:
            self.dtype.clear()
            self.dtype.addItems(offered)
            self.dtype.setCurrentText(current if current in offered else offered[0])
        finally:
            self._refilling = False
        self._follow_choice()
        for i, d in enumerate(offered):
            words = precision_words(d, profile.sizes)
            self.dtype.setItemData(i, words, Qt.ItemDataRole.ToolTipRole)
        self._profile = profile
        self._explain()

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
        typed = self.state.selection.typed
        if typed:
            # Reached from the page list, past the Model page's waiting Convert →.
            show_error(
                self,
                {
                    "message": f"You typed {typed[:200]} on the Model page; it is not read yet",
                    "hint": "Press Inspect there to convert it, or put back "
                    f"{self.state.source[:200]} to convert that",
                },
            )
            return
        if not self.output.text().strip():
            show_error(self, {"message": "No package folder", "hint": "Choose where it goes"})
            return
        if not self._confirm_fit() or not self._confirm_replace():
            return
        self.state.selection.set_precision(self.dtype.currentText(), self.target.currentText())
        self.progress.start()
        self.result.clear()
        self._out = self.output.text().strip()
        self._run = (self.state.source, self.dtype.currentText(), self.target.currentText())
        self._set_running(True)
        self.runner.start(
            "convert",
            {
                "source": self.state.source,
                "output": self._out,
                "dtype": self.dtype.currentText(),
                "ep": self.target.currentText(),
                **self.state.consents(self.state.source),
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
        self.progress.show_progress(p)

    @Slot(object)
    def _on_result(self, manifest: Manifest) -> None:
        out = self._out or self.output.text().strip()
        self.progress.finished()
        self.result.show_manifest(manifest, out)
        source, dtype, target = self._run
        self.state.set_converted(Converted(source, out, dtype, target))
        self.result.set_enabled(True)

    @Slot(dict)
    def _on_failed(self, error: dict[str, Any]) -> None:
        kind = str(error.get("kind"))
        if kind in consent.QUESTIONS:
            # A question, not a failure: the page waits for the answer, then says it.
            self.progress.asking()
            if consent.ask(self, kind, str(error.get("message") or "")):
                self.state.consent(kind, self.state.source)
                QTimer.singleShot(0, self.convert)  # once this job's runner is free
            else:
                self.progress.declined()
            return
        self.progress.failed(error.get("message"))
        show_error(self, error)

    @Slot()
    def _on_cancelled(self) -> None:
        self.progress.cancelled()

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
