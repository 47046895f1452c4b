"""The one place the GUI shows an error: message, what to do next, details on demand."""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget

from mmforge.gui.safe_text import MAX_SHOWN, SHORT, SHORT_LINES, for_display

log = logging.getLogger(__name__)

# What to do next in the app, for the kinds of error whose backend hint is a command.
APP_HINTS = {
    "hub_auth": "Accept the model's terms on its hub page, then sign in with File > Hugging "
    "Face account…",
    "hub_not_found": "Check the spelling (Find a model… on the Model page searches the hub); "
    "for a private model, sign in with File > Hugging Face account…",
}


def show_error(parent: QWidget | None, error: dict[str, Any], title: str = "mmforge") -> None:
    """Show `{"message", "hint", "details"}` in a dialog; never a raw traceback up front.

    It goes into the GUI's log file too, details included.
    """
    message, hint, details = (str(error.get(k) or "") for k in ("message", "hint", "details"))
    # The backend's hint names the command line's sign-in (`hf auth login`); the app has
    # its own.
    hint = APP_HINTS.get(str(error.get("kind")), hint)
    log.warning(  # bounded: a hostile message must not fill the disk either
        "%s (%s)%s",
        message[:MAX_SHOWN],
        hint[:MAX_SHOWN],
        f"\n{details[:MAX_SHOWN]}" if details else "",
    )
    box = QMessageBox(parent)
    box.setIcon(QMessageBox.Icon.Warning)
    box.setWindowTitle(title)
    # Plain text, cut to a size Qt lays out at once: a message may quote a config, a file
    # name or a model's answer, and rich text would load any file an <img> in it names.
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setText(for_display(message or "Something went wrong", SHORT, SHORT_LINES))
    if hint:
        box.setInformativeText(for_display(hint, SHORT, SHORT_LINES))
    # What the labels cut off is in Details, whole (up to what Details shows).
    cut = [t for t in (message, hint) if for_display(t, SHORT, SHORT_LINES) != t]
    details = "\n\n".join([*cut, details]).strip()
    if details:
        box.setDetailedText(for_display(details))
    box.setObjectName("errorDialog")
    box.open()
