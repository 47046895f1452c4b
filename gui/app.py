"""Starting the desktop app: fonts, theme, settings, the window, or the self-test."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mmforge.gui.log_file import log_file


def run(self_test: bool = False, screenshots: Path | None = None) -> int:
    """Open the window (or drive the demo flow with `self_test`); the exit code.

    With `screenshots`, the self-test saves a picture of the window at each page there.
    """
    if self_test and sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
        # Linux without X11: offscreen. Windows and macOS always have their own platform
        # (Windows has no DISPLAY: QT_QPA_PLATFORM=offscreen asks for offscreen there).
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    _check_display()
    _log_to_file()
    from PySide6.QtCore import QSettings
    from PySide6.QtGui import QFontDatabase, QIcon
    from PySide6.QtWidgets import QApplication

    from mmforge import resources
    from mmforge.gui.main_window import MainWindow

    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication(sys.argv[:1])
    app.setApplicationName("Multimodal Forge")
    app.setOrganizationName("mmforge")
    app.setStyle("Fusion")  # follows the system's light or dark scheme
    app.setWindowIcon(QIcon(str(resources.HERE / "mmforge.png")))
    font = resources.HERE / "DejaVuSans.ttf"
    if font.is_file():
        QFontDatabase.addApplicationFont(str(font))  # text renders where fonts are missing
    settings = QSettings()
    window = MainWindow(settings, restore=not self_test)
    # However the app ends (a quit need not close the window first), the workers end too.
    app.aboutToQuit.connect(window.shutdown_workers)
    window.show()
    if os.environ.get("MMFORGE_QUIT_WHEN_SHOWN"):
        _quit_when_shown(app, window)
    if self_test:
        from mmforge.gui.self_test import SelfTest

        snapshot = None
        if screenshots is not None:
            screenshots.mkdir(parents=True, exist_ok=True)

            def snapshot(page: str) -> None:
                window.grab().save(str(screenshots / f"{page}.png"), "PNG")

        test = SelfTest(window, snapshot)
        test.start()
        code = app.exec()
        return 0 if test.ok and code == 0 else 1
    return int(app.exec())


def _check_display() -> None:
    """Refuse with one line where Qt would abort (exit 134) for want of a display.

    Raises:
        MmforgeError: Linux with no X11 or Wayland display and no Qt platform chosen.
    """
    from mmforge.backend.errors import MmforgeError

    if not sys.platform.startswith("linux"):
        return
    if any(os.environ.get(v) for v in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")):
        return
    raise MmforgeError(
        "There is no display to open the window on",
        "Start mmforge from a desktop session (or under xvfb-run); `mmforge --help` lists "
        "the command line, which needs no display",
    )


def _log_to_file() -> None:
    """A windowed app has no console: warnings and errors go to the user's log folder."""
    import logging

    path = log_file()
    try:
        # Private, like the conversations: the log names files, models and errors.
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.parent.chmod(0o700)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        path.chmod(0o600)  # a log an older version made 0644
        handler = logging.FileHandler(path, encoding="utf-8")
    except OSError:
        return  # no log is better than no window
    from mmforge.backend.untrusted import EscapingFormatter  # messages quote checkpoints

    handler.setFormatter(EscapingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.WARNING)
    logging.getLogger().addHandler(handler)


def _quit_when_shown(app: Any, window: Any) -> None:
    """A measuring aid (packaging/test_linux.sh): close as soon as the window is up.

    It reports whether the GUI process imported any heavy library: it must not, or the
    window would wait for it.
    """
    from PySide6.QtCore import QTimer

    def done() -> None:
        heavy = ("torch", "transformers", "onnxruntime_genai", "onnxruntime")
        loaded = [m for m in heavy if m in sys.modules]
        sys.stderr.write(f"mmforge: window shown; heavy modules in the GUI process: {loaded}\n")
        window.close()
        app.quit()

    QTimer.singleShot(0, done)
