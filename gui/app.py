"""Starting the desktop app: fonts, theme, settings, the window, or the self-test."""

from __future__ import annotations

import os
import sys


def run(self_test: bool = False) -> int:
    """Open the window (or drive the demo flow offscreen with `self_test`); exit code."""
    if self_test and not os.environ.get("DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings
    from PySide6.QtGui import QFontDatabase
    from PySide6.QtWidgets import QApplication

    from mmforge import resources
    from mmforge.gui.main_window import MainWindow

    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication(sys.argv[:1])
    app.setApplicationName("Multimodal Forge")
    app.setOrganizationName("mmforge")
    app.setStyle("Fusion")  # follows the system's light or dark scheme
    font = resources.HERE / "DejaVuSans.ttf"
    if font.is_file():
        QFontDatabase.addApplicationFont(str(font))  # text renders where fonts are missing
    settings = QSettings()
    window = MainWindow(settings)
    window.show()
    if self_test:
        from mmforge.gui.self_test import SelfTest

        test = SelfTest(window)
        test.start()
        code = app.exec()
        return 0 if test.ok and code == 0 else 1
    return int(app.exec())
