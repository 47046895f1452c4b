"""The question before quitting while a long job runs (a conversion, a verify, a download).

Quitting stops such a job: a real model's conversion can be an hour's work. Nothing else
is a reason to ask: an unsent message is kept as a draft (`chat_drafts`) and comes back.

No "finish in the background" is offered: a job runs in a worker process that reports to
the window through its pipes and keeps its files in a private temporary folder that ends
with the job (`backend/worker/client.py`), so the worker cannot outlive the window. The
command line (`mmforge convert`) converts on its own, but it starts over, it does not
finish this run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QMessageBox, QProgressBar

from mmforge.gui.safe_text import for_display

if TYPE_CHECKING:
    from mmforge.gui.main_window import MainWindow

QUIT = "Quit and stop it"
QUIT_ALL = "Quit and stop them"
KEEP = "Keep working"
ENDED = "Quit"
FOLLOW_MS = 500  # how often the open question looks at the jobs again


def _done(bar: QProgressBar) -> str:
    """How far a progress bar is, as " (43 % done)"; "" while it does not know."""
    if bar.maximum() <= bar.minimum():
        return ""
    share = (bar.value() - bar.minimum()) / (bar.maximum() - bar.minimum())
    # A job still running is not done: its bar is full during the last check.
    return f" ({min(99, int(100 * max(0.0, share)))} % done)"


def running_jobs(window: MainWindow) -> list[str]:
    """What quitting would stop, one sentence each (none: nothing to ask about)."""
    jobs = []
    if window.convert_view.runner.running:
        jobs.append(
            f"A conversion is running{_done(window.convert_view.overall)}. Quitting stops it: "
            "converting again starts over (what was downloaded stays in the Hugging Face "
            "cache)."
        )
    if window.verify_view.runner.running:
        jobs.append(
            f"A verification is running{_done(window.verify_view.progress)}. Quitting "
            "stops it: Verify starts over next time."
        )
    model = window.model_view
    if model.runner.running:
        doing = for_display(model.status.text(), 200) or "Reading the model"
        jobs.append(
            f"The Model page is at work{_done(model.progress)}: {doing} Quitting stops it "
            "(a download goes on where it stopped next time)."
        )
    return jobs


def confirm(window: MainWindow) -> bool:
    """Ask whether to quit and stop the jobs running; True to quit (none: True at once).

    The question follows the jobs while it is open: how far they are, and that they
    ended (then Quit stops nothing).
    """
    jobs = running_jobs(window)
    if not jobs:
        return True
    box = QMessageBox(window)
    box.setObjectName("quitQuestion")
    box.setIcon(QMessageBox.Icon.Warning)
    box.setWindowTitle("Quit Multimodal Forge?")
    box.setTextFormat(Qt.TextFormat.PlainText)  # the Model page's line quotes a name
    box.setInformativeText("Your conversations and unsent messages are kept either way.")
    quit_button = box.addButton(QUIT, QMessageBox.ButtonRole.DestructiveRole)
    keep = box.addButton(KEEP, QMessageBox.ButtonRole.RejectRole)
    box.setDefaultButton(keep)  # Enter keeps the work: stopping it takes a choice
    box.setEscapeButton(keep)

    def say() -> None:
        now = running_jobs(window)
        box.setText("\n\n".join(now) if now else "What was running has ended.")
        quit_button.setText(QUIT if len(now) == 1 else QUIT_ALL if now else ENDED)

    say()
    follow = QTimer(box, interval=FOLLOW_MS)
    follow.timeout.connect(say)
    follow.start()
    box.exec()
    follow.stop()
    return box.clickedButton() is quit_button
