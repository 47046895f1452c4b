"""The Convert page's progress: all stages, the stage in hand (its rate, time left), the log."""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import Slot
from PySide6.QtWidgets import QPlainTextEdit, QProgressBar, QPushButton, QVBoxLayout, QWidget

from mmforge.backend.units import human_rate
from mmforge.gui.safe_text import for_display, plain_label

STAGES = ("download", "inspect", "build", "weights", "write", "quantize", "package", "validate")
# The stages as the page says them (the log keeps the stage names).
STAGE_WORDS = {
    "download": "Downloading",
    "inspect": "Reading the model",
    "build": "Building the graphs",
    "weights": "Placing the weights",
    "write": "Writing the graphs",
    "quantize": "Rounding the weights",
    "package": "Writing the package",
    "validate": "Checking the package runs",
    "done": "Done",
}


def stage_words(stage: str) -> str:
    """A stage as the page says it: "Building the graphs" for "build"."""
    return STAGE_WORDS.get(stage, stage[:1].upper() + stage[1:])


class ConvertProgress(QWidget):
    """How far a conversion is, from `Progress` events; the log under a toggle."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.overall = QProgressBar()
        self.overall.setRange(0, 1000)
        self.overall.setFormat("all stages: %p%")
        self.overall.setAccessibleName("Conversion progress, all stages")
        # The stage in hand on its own bar: a download is one of eight stages, and its
        # share of the overall bar says little about how far the download is.
        self.stage_bar = QProgressBar()
        self.stage_bar.setRange(0, 1000)
        self.stage_bar.setAccessibleName("Progress of the current stage")
        self.stage = plain_label(wrap=True)  # a failure's message can be long
        self.log_toggle = QPushButton("Show log")
        self.log_toggle.setCheckable(True)
        self.log = QPlainTextEdit(readOnly=True)
        self.log.setAccessibleName("Conversion log")
        self.log.setVisible(False)
        self.log_toggle.toggled.connect(self._toggle_log)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.overall, self.stage_bar, self.stage, self.log_toggle, self.log):
            layout.addWidget(widget)
        self.started = 0.0
        # The current stage, and when and where its rate was last measured from.
        self.stage_name = ""
        self._stage_since = (0.0, 0.0)
        self.downloaded = False  # bytes came down (a cancelled download resumes)

    @Slot(bool)
    def _toggle_log(self, shown: bool) -> None:
        self.log.setVisible(shown)
        self.log_toggle.setText("Hide log" if shown else "Show log")

    def clear(self) -> None:
        """Forget the previous run: its bars, stage line and log."""
        self.overall.setValue(0)
        self.stage_bar.setRange(0, 1000)
        self.stage_bar.setValue(0)
        self.stage_bar.setFormat("%p%")
        self.stage.setText("")
        self.log.clear()

    def start(self) -> None:
        """A conversion starts: an empty log, the clock from now."""
        self.log.clear()
        self.overall.setValue(0)
        # Busy until the first event (the worker starts and reads the model for a second
        # or two): the previous run's "finished" must not show meanwhile.
        self.stage_bar.setRange(0, 0)
        self.stage_bar.setFormat("starting")
        self.stage.setText("Starting: reading the model…")
        self.started = time.monotonic()
        self.stage_name, self.downloaded = "", False

    def show_progress(self, p: Any) -> None:
        """One `Progress` event: both bars, the stage line and a log line."""
        now = time.monotonic()
        index = STAGES.index(p.stage) if p.stage in STAGES else len(STAGES) - 1
        fraction = min(1.0, p.done / p.total) if p.total else 0.0
        self.overall.setValue(int((index + fraction) / len(STAGES) * 1000))
        if p.stage != self.stage_name:
            self.stage_name, self._stage_since = p.stage, (now, float(p.done))
        if p.total:
            self.stage_bar.setRange(0, 1000)
            self.stage_bar.setValue(int(fraction * 1000))
        else:
            self.stage_bar.setRange(0, 0)  # busy: the stage has no count
        self.stage_bar.setFormat(f"{stage_words(p.stage)}: %p%")
        self.stage.setText(self._stage_text(p, now))
        elapsed = now - self.started
        self.log.appendPlainText(f"[{elapsed:6.1f}s] {p.stage}: {p.message}")

    def _stage_text(self, p: Any, now: float) -> str:
        """What the stage is doing, with its rate and time left where it counts bytes."""
        what = stage_words(p.stage)
        if p.unit != "bytes" or not p.total:
            # "(3 of 12 tensors)"; nothing for a stage of one step ("1 of 1 steps").
            count = f" ({p.done:g} of {p.total:g} {p.unit})" if (p.total or 0) > 1 else ""
            return f"{what}: {p.message}{count}" if p.message else f"{what}{count}"
        if p.stage == "download" and p.done:
            self.downloaded = True
        since, done_then = self._stage_since
        seconds = now - since
        text = f"{what}: {_amount(p.done, p.total)}"
        if seconds >= 0.5 and p.done > done_then:
            rate = (p.done - done_then) / seconds
            left = (p.total - p.done) / rate
            text += f" at {human_rate(rate)}, about {_duration(left)} left"
        return f"{text} — {p.message}" if p.message else text

    def finished(self) -> None:
        """The conversion made its package."""
        self.overall.setValue(1000)
        self.stage_bar.setRange(0, 1000)
        self.stage_bar.setValue(1000)
        self.stage_bar.setFormat("finished")
        self.stage.setText("Done: the package was loaded and answered once, as a check.")

    def failed(self, message: object) -> None:
        """The conversion failed with `message`."""
        self.stage.setText(for_display(f"Failed: {message}", 500))
        self.stage_bar.setRange(0, 1000)
        self.stage_bar.setFormat("failed at %p%" if self.stage_bar.value() > 0 else "failed")
        self.log.appendPlainText(f"error: {message}")

    def asking(self) -> None:
        """The conversion waits for the user's consent (gui/consent.py): nothing written."""
        self.stage.setText("Waiting for your answer: nothing is converted until you agree.")
        self.stage_bar.setRange(0, 1000)
        self.stage_bar.setFormat("waiting")

    def declined(self) -> None:
        """The user said no to the consent asked: nothing was written."""
        self.stage.setText(
            "Not converted: you said no. Nothing was written; Convert asks again next time."
        )
        self.stage_bar.setFormat("not converted")
        self.log.appendPlainText("not converted: the user declined")

    def cancelled(self) -> None:
        """The conversion was cancelled: nothing was written; a download resumes."""
        text = "Cancelled: nothing was written, an earlier package is untouched."
        if self.downloaded:
            text += (
                " What was downloaded stays in the Hugging Face cache: converting again "
                "resumes the download where it stopped."
            )
        self.stage.setText(text)
        self.overall.setValue(0)
        self.stage_bar.setRange(0, 1000)
        self.stage_bar.setValue(0)
        self.stage_bar.setFormat("cancelled")


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
