"""Hostile content in the GUI: bad settings, damaged conversations, the log file's mode."""

from __future__ import annotations

import logging
import stat

import pytest
from PySide6.QtCore import QSettings


def test_settings_of_the_wrong_type_fall_back_to_the_defaults(qtbot, tmp_path, monkeypatch, caplog):
    from mmforge.gui.main_window import MainWindow

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ini = tmp_path / "settings.ini"
    ini.write_text(
        "[General]\nappearance=@Invalid()\ndtype=1, 2\n"
        "[chat]\ntop_k=abc\ntemperature=nan\ntop_p=x, y\nseed=1e99\nmax_tokens=\nsample=3\n",
        encoding="utf-8",
    )
    win = MainWindow(QSettings(str(ini), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    chat = win.chat_view
    box = chat.settings_box
    assert (box.top_k.value(), box.temperature.value(), box.top_p.value()) == (50, 0.7, 0.95)
    assert (box.seed.value(), chat.max_tokens.value()) == (-1, 4096)
    assert "chat/top_k" in caplog.text
    win.close()


def test_a_pathological_conversation_file_is_skipped_and_named_in_the_log(
    qtbot, tmp_path, monkeypatch, caplog
):
    from mmforge.backend.chat.conversations import ConversationStore
    from mmforge.gui.main_window import MainWindow

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    store = ConversationStore()
    good = store.new("/some/package")
    good.title = "kept"
    store.save(good)
    for name, text in {
        "deep": "[" * 200_000 + "]" * 200_000,
        "list": "[]",
        "odd": '{"id": "odd", "package": "p", "messages": {"a": 1}}',
        "attr": '{"id": "attr", "package": "p", "messages": [["user"]]}',
    }.items():
        (store.root / name).mkdir()
        (store.root / name / "conversation.json").write_text(text, encoding="utf-8")
    caplog.set_level(logging.WARNING)
    assert [s.title for s in store.list()] == ["kept"]
    for name in ("deep", "list", "odd", "attr"):
        assert str(store.root / name) in caplog.text
    win = MainWindow(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    assert win.chat_view.conversations.count() == 1
    win.close()


def test_the_log_file_is_private(tmp_path, monkeypatch):
    from mmforge.gui import app

    path = tmp_path / "logs" / "mmforge-gui.log"
    monkeypatch.setattr(app, "log_file", lambda: path)
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        app._log_to_file()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        path.chmod(0o644)  # a log written by an older version is made private too
        app._log_to_file()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    finally:
        for handler in set(root.handlers) - set(before):
            root.removeHandler(handler)
            handler.close()


@pytest.fixture(autouse=True)
def _quiet_umask():
    import os

    old = os.umask(0o022)  # the usual umask: a file made without care is 0644
    yield
    os.umask(old)
