"""The one place the GUI shows an error: message, what to do next, details on demand."""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtWidgets import QMessageBox, QWidget

log = logging.getLogger(__name__)


def show_error(parent: QWidget | None, error: dict[str, Any], title: str = "mmforge") -> None:
    """Show `{"message", "hint", "details"}` in a dialog; never a raw traceback up front.

    It goes into the GUI's log file too, details included.
    """
    log.warning(
        "%s (%s)%s",
        error.get("message"),
        error.get("hint"),
        f"\n{error['details']}" if error.get("details") else "",
    )
    box = QMessageBox(parent)
    box.setIcon(QMessageBox.Icon.Warning)
    box.setWindowTitle(title)
    box.setText(str(error.get("message") or "Something went wrong"))
    if error.get("hint"):
        box.setInformativeText(str(error["hint"]))
    if error.get("details"):
        box.setDetailedText(str(error["details"]))
    box.setObjectName("errorDialog")
    box.open()
