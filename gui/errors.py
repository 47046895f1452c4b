"""The one place the GUI shows an error: message, what to do next, details on demand."""

from __future__ import annotations

import logging
import re
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


# Words the backend writes for the command line, said the app's way.
APP_WORDS = (
    (
        re.compile(r"Pass an existing model folder,? or a hub id like org/name\[@revision\].*"),
        "Type a folder on this computer, or a model's name on the Hugging Face hub such as "
        "LiquidAI/LFM2-VL-450M (Find a model… searches the hub)",
    ),
    (re.compile(r" \(or HF_ENDPOINT / a proxy\)"), ""),
    (
        re.compile(
            r"Offline mode is on \(HF_HUB_OFFLINE is set\) and (\S+) is not in the local cache"
        ),
        r"\1 is not on this computer, and downloads are off (HF_HUB_OFFLINE is set where the "
        "app was started)",
    ),
    (
        re.compile(
            r"Check the name's spelling, unset HF_HUB_OFFLINE to download it, or use a local folder"
        ),
        "Check the spelling, start the app without HF_HUB_OFFLINE to download it, pick a "
        "folder on this computer, or try Use the demo model (it needs no network)",
    ),
    (
        re.compile(r"or use a local folder$"),
        "pick a folder on this computer, or try Use the demo model (it needs no network)",
    ),
    (re.compile(r"run the same command again"), "start it again"),
    (  # a package folder too deep for Windows (backend/convert/outpath.py)
        re.compile(r"(Use a package folder of at most \d+ characters) \(-o OUT\)"),
        r"\1 (the Package folder field, or File > Library… > Move library…)",
    ),
    (re.compile(r"\bhub id\b"), "hub name"),
)
# The title of an error shown on a page or dialog: what the user was doing.
TITLES = {
    "ModelView": "Model",
    "ConvertView": "Convert",
    "VerifyView": "Verify",
    "ChatView": "Chat",
    "CompareView": "Compare",
    "LibraryDialog": "Library",
    "ModelBrowser": "Find a model",
    "AccountDialog": "Hugging Face account",
}
APP_NAME = "Multimodal Forge"


def in_app_words(text: str) -> str:
    """A backend message or hint with the command line's words put the app's way."""
    for pattern, words in APP_WORDS:
        text = pattern.sub(words, text)
    return text


def title_for(parent: QWidget | None) -> str:
    """The title of an error: the page or dialog it happened on ("Chat – Multimodal Forge")."""
    widget = parent
    while widget is not None:
        where = TITLES.get(type(widget).__name__)
        if where is not None:
            return f"{where} – {APP_NAME}"
        widget = widget.parentWidget()
    return APP_NAME


def show_error(parent: QWidget | None, error: dict[str, Any], title: str | None = None) -> None:
    """Show `{"message", "hint", "details"}` in a dialog; never a raw traceback up front.

    It goes into the GUI's log file too, details included. The title names the page
    (`title_for`) unless given.
    """
    message, hint, details = (str(error.get(k) or "") for k in ("message", "hint", "details"))
    # The backend's hint names the command line's sign-in (`hf auth login`); the app has
    # its own.
    hint = APP_HINTS.get(str(error.get("kind")), hint)
    message, hint = in_app_words(message), in_app_words(hint)
    title = title or title_for(parent)
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
