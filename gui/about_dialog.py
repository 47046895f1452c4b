"""About: the version, and the licences of what the app bundles."""

from __future__ import annotations

import html
import sys
from pathlib import Path

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QVBoxLayout, QWidget

from mmforge.backend import __version__
from mmforge.gui.log_file import log_file
from mmforge.gui.safe_text import SafeBrowser


def licences_folder() -> Path | None:
    """The installed app's licences (NOTICE, THIRD-PARTY, licence texts), if frozen."""
    base = getattr(sys, "_MEIPASS", None)
    folder = Path(base) / "licenses" if base else None
    return folder if folder is not None and folder.is_dir() else None


def licences_html() -> str:
    """The notice and the bundled components, or the key licences of a source install."""
    folder = licences_folder()
    if folder is None:
        return (
            "<p>Running from a source install: each library keeps its own licence in its "
            "package folder. Qt for Python (PySide6) is used under the LGPL-3.0; the "
            "DejaVu font under the DejaVu Fonts licence.</p>"
        )
    parts = []
    for name in ("NOTICE.txt", "THIRD-PARTY.txt"):
        path = folder / name
        if path.is_file():
            text = html.escape(path.read_text(encoding="utf-8", errors="replace"))
            parts.append(f"<h3>{name}</h3><pre>{text}</pre>")
    texts = sorted(
        p.name for p in folder.iterdir() if p.name not in ("NOTICE.txt", "THIRD-PARTY.txt")
    )
    parts.append(f"<p>Licence texts in {html.escape(str(folder))}: {', '.join(texts)}</p>")
    return "".join(parts)


class AboutDialog(QDialog):
    """The version and the licences."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("About Multimodal Forge")
        self.resize(640, 520)
        title = QLabel(
            f"<h2>Multimodal Forge {__version__}</h2>"
            "<p>Converts Hugging Face multimodal models to ONNX Runtime GenAI, verifies them "
            "stage by stage and chats with them. MIT licence.</p>"
            f"<p>Log file (warnings and errors): {html.escape(str(log_file()))}</p>"
        )
        title.setWordWrap(True)
        self.licences = SafeBrowser()  # licence texts come from installed packages
        self.licences.setObjectName("licences")
        self.licences.setHtml(licences_html())
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(title)
        layout.addWidget(self.licences, 1)
        layout.addWidget(buttons)
