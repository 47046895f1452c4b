"""Issue 47 in the app: saved conversations that start it, list and export without harm."""

from __future__ import annotations

import json
import logging
import os
import shutil

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QMessageBox

from mmforge import resources
from mmforge.backend.attachments import IMAGE, prepare
from mmforge.backend.chat.conversations import FILE, ConversationStore, Message
from tests.backend.chat.test_hostile_conversations import _conversation, _write


def _hostile(store: ConversationStore, name: str, field: str, value: str) -> bytes:
    """A conversation file with `value` (JSON text: NaN, 1e400) in `field`; its bytes."""
    data = _conversation(name)
    if field == "token_ids":
        data["messages"][1]["token_ids"] = [1, "@HOSTILE@"]
    else:
        data[field] = "@HOSTILE@"
    return _write(store, name, data, {"@HOSTILE@": value}).read_bytes()


def test_the_app_starts_past_conversation_files_with_hostile_numbers(
    qtbot, tmp_path, monkeypatch, caplog
):
    """NaN, Infinity or 1e400 in `updated`, `token_ids` or `forgotten` stopped `mmforge
    gui` at every start (exit 70) until the user found the file."""
    from mmforge.gui.conversation_list import TITLE
    from mmforge.gui.main_window import MainWindow

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    store = ConversationStore()
    good = store.new("/some/package")
    good.title = "kept"
    good.messages.append(Message("user", "hello"))
    store.save(good)
    files = {
        "nan-updated": _hostile(store, "nan-updated", "updated", "NaN"),
        "inf-updated": _hostile(store, "inf-updated", "updated", "Infinity"),
        "huge-token": _hostile(store, "huge-token", "token_ids", "1e400"),
        "inf-forgotten": _hostile(store, "inf-forgotten", "forgotten", "Infinity"),
        "far-updated": _hostile(store, "far-updated", "updated", "1e300"),
    }
    caplog.set_level(logging.WARNING)
    win = MainWindow(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    items = win.chat_view.conversation_list.items
    assert [items.item(i).data(TITLE) for i in range(items.count())] == ["kept"]
    for name, text in files.items():
        assert str(store.root / name) in caplog.text  # named in the log
        assert (store.root / name / FILE).read_bytes() == text  # left as it was
    win.close()


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), -float("inf"), 1e300, 1e18])
def test_a_date_no_clock_shows_is_left_out_of_the_list(seconds):
    from mmforge.gui.conversation_list import when

    assert when(seconds) == ""


def test_an_export_copies_only_the_conversations_own_checked_files(
    qtbot, window, tmp_path, monkeypatch
):
    """Export copied a file from outside the conversation's folder (and anything the file
    named), and wrote the answer's HTML as it came."""
    chat = window.chat_view
    window.show_page(chat)
    store = ConversationStore(chat.store.root)
    conversation = store.new("/pkg")
    copies = store.attachments_folder(conversation.id)
    own = prepare(resources.probe_image(), IMAGE, copies)
    conversation.messages += [
        Message("user", "What is this? <img src=x onerror=alert(1)>", [own]),
        Message("assistant", "A probe. <script>alert(2)</script>"),
    ]
    store.save(conversation)
    secret = tmp_path / "secret.png"
    shutil.copyfile(resources.probe_image(), secret)
    secret.write_bytes(secret.read_bytes() + b"SECRET")
    (copies / "link.png").symlink_to(secret)
    os.mkfifo(copies / "pipe.png")
    (copies / "notes.png").write_text("hello, I am text")
    path = store.folder(conversation.id) / FILE
    data = json.loads(path.read_text())
    data["messages"][0]["attachments"] += [
        {"kind": "image", "path": str(secret), "name": "outside.png"},
        {"kind": "image", "path": "attachments/../../../secret.png", "name": "climbs.png"},
        {"kind": "image", "path": "attachments/link.png", "name": "link.png"},
        {"kind": "image", "path": "attachments/pipe.png", "name": "pipe.png"},
        {"kind": "image", "path": "attachments/notes.png", "name": "notes.png"},
    ]
    path.write_text(json.dumps(data))
    chat.refresh_conversations()
    chat.conversations.itemClicked.emit(chat.conversation_list.item_for(conversation.id))
    assert chat.conversation.id == conversation.id

    chat.export_to(tmp_path / "chat.md", as_json=False)
    copied = sorted(p.name for p in (tmp_path / "chat_files").iterdir())
    assert copied == [f"1-{own.path.name}"]
    assert b"SECRET" not in (tmp_path / "chat_files" / copied[0]).read_bytes()
    markdown = (tmp_path / "chat.md").read_text()
    assert "<script>" not in markdown and "<img" not in markdown
    for name in ("outside.png", "climbs.png", "link.png", "pipe.png", "notes.png"):
        assert name in markdown  # named, with why it was not copied
    assert markdown.count("not copied") == 5
    assert not [w for w in window.findChildren(QMessageBox) if w.isVisible()]
