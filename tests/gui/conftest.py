"""The main window on a fresh profile, shared by the GUI tests."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    """A shown MainWindow with its own settings, data and cache folders (a new user)."""
    from mmforge.gui.main_window import MainWindow

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings)
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()
