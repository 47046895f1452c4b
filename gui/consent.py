"""Consent the command line gives with a flag, asked in the app instead.

A model defined only by code in its repository (`--trust-remote-code`), weights saved
as pickles (`--allow-pickle`) and a family that converts only as an approximation
(`--approximate`) are refused until the user agrees, for that model: the app asks once,
then repeats the step that was refused.
"""

from __future__ import annotations

import html

from PySide6.QtWidgets import QMessageBox, QWidget

from mmforge.backend.errors import APPROXIMATE, PICKLE, REMOTE_CODE
from mmforge.gui.safe_text import as_html

QUESTIONS = {
    REMOTE_CODE: (
        "Read a model defined by its repository's code?",
        "mmforge never runs a repository's code: it reads this model's files as data. "
        "Go on with this model?",
    ),
    PICKLE: (
        "Read pickled weights?",
        "mmforge reads them with PyTorch's weights_only loader, which refuses anything but "
        "tensors; only agree for a model from someone you trust. Read them for this model?",
    ),
    APPROXIMATE: (
        "Convert as an approximation?",
        "The package would not answer exactly as the released model does. Verify will say "
        "APPROXIMATE, never PASS, and the Model card says what differs. Convert it anyway?",
    ),
}
# The worker's argument each consent sets.
ARGUMENTS = {REMOTE_CODE: "trust_remote_code", PICKLE: "allow_pickle", APPROXIMATE: "approximate"}


def ask(parent: QWidget, kind: str, message: str) -> bool:
    """Ask for the consent `kind` names, after the refusal's own words; No is the default."""
    title, question = QUESTIONS[kind]
    # The refusal may quote the model's files: bounded and escaped; the question is ours.
    text = as_html(message) + "<p>" + html.escape(question) + "</p>"
    answer = QMessageBox.question(
        parent,
        title,
        text,
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
        QMessageBox.StandardButton.No,
    )
    return answer == QMessageBox.StandardButton.Yes
