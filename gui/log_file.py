"""Where the GUI writes its warnings and errors.

Its own module: the About dialog shows it without importing `app`, which imports the
window that opens the dialog.
"""

from __future__ import annotations

from pathlib import Path


def log_file() -> Path:
    """Where the GUI writes its warnings and errors."""
    from mmforge.backend.vocabulary import log_folder

    return log_folder() / "mmforge-gui.log"
