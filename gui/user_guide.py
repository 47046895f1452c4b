"""Help > User guide: the README's user guide, shipped with the app and shown as Markdown.

The guide is `resources/user_guide.md`, a copy of the README's user-guide section that
ships in the wheel and the installer (a test keeps the two equal). It is drawn in a
browser that loads nothing a document names: the README's screenshots are left out, and
its links to the docs/ pages are text to read, not places to go.
"""

from __future__ import annotations

import re

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QVBoxLayout, QWidget

from mmforge.gui.safe_text import SafeBrowser

# A Markdown image on a line of its own (the README's screenshots).
_IMAGE_LINE = re.compile(r"^!\[[^\]]*\]\([^)]*\)\s*$", re.MULTILINE)


def guide_text() -> str:
    """The guide as Markdown, without its pictures (a note when the file is missing)."""
    from mmforge.resources import user_guide_file

    try:
        text = user_guide_file().read_text(encoding="utf-8")
    except OSError:
        return "The user guide is missing from this installation: reinstall the app."
    return re.sub(r"\n{3,}", "\n\n", _install_last(_IMAGE_LINE.sub("", text)))


def _install_last(text: str) -> str:
    """The guide with its Install section moved to the end.

    Whoever opens it from the app has installed it: the guide opened on build scripts and
    library versions, with "A first model to try" pages below.
    """
    parts = re.split(r"(?m)^(?=### )", text)
    install = [p for p in parts if p.startswith("### Install")]
    rest = [p for p in parts if not p.startswith("### Install")]
    return "".join(rest).rstrip("\n") + "\n\n" + "".join(install) if install else text


class UserGuideDialog(QDialog):
    """The user guide in a scrolling window."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Multimodal Forge: user guide")
        self.setObjectName("userGuide")
        self.resize(720, 520)  # fits a 1024×600 screen with its frame
        self.text = SafeBrowser()
        self.text.setObjectName("userGuideText")
        self.text.setAccessibleName("User guide")
        self.text.setOpenLinks(False)  # the docs/ pages are not shipped: links stay text
        self.text.setMarkdown(guide_text())
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.text, 1)
        layout.addWidget(buttons)
