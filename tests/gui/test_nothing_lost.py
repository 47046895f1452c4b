"""Issue 50, item 2 "Nothing lost", and the stale choice of Find a model.

A review of the real window found: Ctrl+Q threw an unsent message away; closing during a
conversion threw the conversion away without asking; a restart opened on the Model page
with no conversation and no package; "Use this model" left the previous model's card, and
Convert → converted that one. Each test here failed before the change it is named for.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, QTimer
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QApplication, QMessageBox

from mmforge import resources
from mmforge.backend.attachments import IMAGE
from mmforge.backend.chat.conversations import ConversationStore, Message
from mmforge.backend.chat.values import SessionInfo
from mmforge.backend.jobs import Progress
from mmforge.gui import bridge
from tests.hung_worker import alive, end, use_hung_worker, wait_hung

LONG = 120_000
GRACE_S = 0.5


@pytest.fixture
def profile(tmp_path, monkeypatch):
    """A fresh profile's folders and settings file, shared by the windows of one test."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(bridge, "CLOSE_GRACE_S", GRACE_S, raising=False)
    return tmp_path / "settings.ini"


def _start(qtbot, ini: Path):
    """The app as it starts: a window on the settings file (restoring the last session)."""
    from mmforge.gui.main_window import MainWindow

    win = MainWindow(QSettings(str(ini), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    win.show()
    return win


def _quit(win) -> None:
    """Ctrl+Q (File > Quit), then the settings on disk, as the next start reads them."""
    win.quit_action.trigger()
    win.state.settings.sync()


def _saved(root: Path, title: str, package: Path | str = "/nowhere/pkg") -> str:
    store = ConversationStore(root)
    conversation = store.new(package)
    conversation.title = title
    conversation.messages += [Message("user", f"About {title}?"), Message("assistant", "Yes.")]
    store.save(conversation)
    return conversation.id


def _answer(button: str, asked: list[str]) -> None:
    """Answer the quit question (when it comes) with `button`, noting its words."""

    def click() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, click)  # not shown yet
            return
        asked.append(box.text() + "\n" + box.informativeText())
        asked.append(" | ".join(b.text() for b in box.buttons()))
        next(b for b in box.buttons() if b.text() == button).click()

    QTimer.singleShot(0, click)


class _WindowManagerClose(QCloseEvent):
    """The close the window's title-bar button sends (spontaneous: from the system)."""

    def spontaneous(self) -> bool:
        return True


# -- 1. drafts -----------------------------------------------------------------------


def test_an_unsent_message_survives_ctrl_q_with_its_conversation(qtbot, profile):
    """Ctrl+Q with a typed message closed at once and the message was gone after the
    restart. Each conversation keeps its own draft, attachments included."""
    win = _start(qtbot, profile)
    chat = win.chat_view
    first = _saved(chat.store.root, "Cats")
    second = _saved(chat.store.root, "Dogs")
    chat.refresh_conversations()
    win.show_page(chat)
    chat.open_conversation(first)
    chat.input.setPlainText("Half a thought about cats")
    picture = Path(resources.HERE / "probe.png")
    chat.strip.add(picture, IMAGE)
    chat.open_conversation(second)
    assert chat.input.toPlainText() == "" and chat.strip.files == []
    chat.input.setPlainText("And dogs")
    chat.open_conversation(first)
    assert chat.input.toPlainText() == "Half a thought about cats"
    assert chat.strip.files == [(picture, IMAGE)]
    _quit(win)  # a draft is no reason to ask: it is saved
    assert not win.isVisible()

    again = _start(qtbot, profile)
    chat = again.chat_view
    assert again.current_page() is chat
    assert chat.conversation is not None and chat.conversation.id == first
    assert chat.conversation_list.current_title() == "Cats"
    assert chat.input.toPlainText() == "Half a thought about cats"
    assert chat.strip.files == [(picture, IMAGE)]
    chat.open_conversation(second)
    assert chat.input.toPlainText() == "And dogs"
    again.close()


def test_a_sent_message_leaves_no_draft_and_a_new_conversation_keeps_its_own(qtbot, profile):
    win = _start(qtbot, profile)
    chat = win.chat_view
    win.show_page(chat)
    chat.input.setPlainText("Typed before any conversation")
    chat.drafts.save_now()
    saved = _saved(chat.store.root, "Cats")
    chat.refresh_conversations()
    chat.open_conversation(saved)
    assert chat.input.toPlainText() == ""
    chat.new_conversation()  # nothing loaded: an empty page, the new conversation's draft
    assert chat.input.toPlainText() == "Typed before any conversation"
    chat.input.clear()
    chat.drafts.save_now()
    assert not chat.drafts.store.file_for(None).exists()  # an empty draft is no file
    win.close()


def test_a_draft_typed_while_a_new_conversation_is_first_saved_stays_with_it(qtbot, profile):
    """The worker saves a new conversation with its first turn: the draft typed meanwhile
    stays in the box and is that conversation's from then on."""
    win = _start(qtbot, profile)
    chat = win.chat_view
    other = _saved(chat.store.root, "Dogs")
    chat.refresh_conversations()
    store = ConversationStore(chat.store.root)
    new = store.new("/nowhere/pkg")
    chat.bridge.conversation.emit(new)  # what a loaded worker reports: new, not saved
    qtbot.waitUntil(lambda: chat.conversation is not None and chat.conversation.id == new.id)
    chat.input.setPlainText("typed while it answers")
    new.messages += [Message("user", "Hi"), Message("assistant", "Hello.")]
    store.save(new)
    chat.bridge.conversation.emit(store.load(new.id))
    qtbot.waitUntil(lambda: chat.conversation is not None and chat.conversation.messages != [])
    assert chat.input.toPlainText() == "typed while it answers"
    chat.open_conversation(other)
    assert chat.input.toPlainText() == ""
    chat.open_conversation(new.id)
    assert chat.input.toPlainText() == "typed while it answers"
    assert not chat.drafts.store.file_for(None).exists()
    win.close()


def test_a_draft_is_written_whole_or_not_at_all(qtbot, profile, monkeypatch):
    """Write then rename, as conversations are: a failed write keeps the last draft."""
    from mmforge.backend.chat import conversations

    win = _start(qtbot, profile)
    chat = win.chat_view
    saved = _saved(chat.store.root, "Cats")
    chat.refresh_conversations()
    chat.open_conversation(saved)
    chat.input.setPlainText("first words")
    chat.drafts.save_now()
    path = chat.drafts.store.file_for(saved)
    assert json.loads(path.read_text())["text"] == "first words"
    assert path.stat().st_mode & 0o777 == 0o600

    def torn(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(conversations.os, "replace", torn)
    chat.input.setPlainText("second words")
    chat.drafts.save_now()  # fails, said on the status line, no crash
    assert json.loads(path.read_text())["text"] == "first words"
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []
    assert "draft" in chat.status.text().lower()
    monkeypatch.undo()
    win.close()


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"[1, 2, 3]",
        b'{"format": 1, "text": 12}',
        b'{"format": 1, "text": "x", "attachments": [{"path": "/dev/zero", "kind": "image"}]}',
        b'{"format": 1, "text": "x", "attachments": "all"}',
        b'{"format": 1, "text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"format": 1, "text": 1e400}',
        b"\xff\xfe\x00garbage",
    ],
)
def test_a_damaged_or_hostile_draft_file_is_ignored_with_a_log_line(
    qtbot, profile, caplog, content
):
    win = _start(qtbot, profile)
    chat = win.chat_view
    saved = _saved(chat.store.root, "Cats")
    path = chat.drafts.store.file_for(saved)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    chat.refresh_conversations()
    with caplog.at_level(logging.WARNING):
        chat.open_conversation(saved)
    assert chat.conversation is not None and chat.conversation.id == saved
    # Nothing strange reaches the draft: a draft that does not read is left out whole, and
    # an attachment that is not a plain file is never opened.
    assert chat.strip.files == []
    assert chat.input.toPlainText() in ("", "x")
    if chat.input.toPlainText() == "":
        assert any("draft" in r.getMessage() for r in caplog.records)
    win.close()


def test_a_draft_file_that_is_a_fifo_is_not_read(qtbot, profile, caplog):
    win = _start(qtbot, profile)
    chat = win.chat_view
    saved = _saved(chat.store.root, "Cats")
    path = chat.drafts.store.file_for(saved)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)  # reading it would block the window for ever
    chat.refresh_conversations()
    with caplog.at_level(logging.WARNING):
        chat.open_conversation(saved)
    assert chat.input.toPlainText() == ""
    win.close()


# -- 2. a question before quitting a running job ---------------------------------------


def test_quitting_during_a_conversion_asks_and_keep_working_keeps_it(
    qtbot, profile, tmp_path, monkeypatch
):
    win = _start(qtbot, profile)
    qtbot.waitUntil(lambda: not win.chat_view.eps.running, timeout=60_000)
    use_hung_worker(monkeypatch, tmp_path / "hung")
    convert = win.convert_view
    convert.runner.start("convert", {"source": "x", "output": str(tmp_path / "out")})
    pids = wait_hung(tmp_path / "hung")
    try:
        convert.runner.progress.emit(Progress("weights", 1, 2))  # 3 of 8 stages and a half
        asked: list[str] = []
        _answer("Keep working", asked)
        win.quit_action.trigger()
        assert win.isVisible() and convert.runner.running
        assert "conversion is running (43 % done)" in asked[0]
        assert "background" not in asked[1].lower()  # the worker cannot outlive the window
        # The window's close button asks too.
        _answer("Keep working", asked)
        event = _WindowManagerClose()
        QApplication.sendEvent(win, event)
        assert not event.isAccepted() and win.isVisible() and convert.runner.running
        _answer("Quit and stop it", asked)
        win.quit_action.trigger()
        assert not win.isVisible() and not convert.runner.running
        assert not any(alive(pid) for pid in pids)
    finally:
        end(pids)


def test_quitting_during_a_verify_names_it(qtbot, profile, tmp_path, monkeypatch):
    win = _start(qtbot, profile)
    qtbot.waitUntil(lambda: not win.chat_view.eps.running, timeout=60_000)
    use_hung_worker(monkeypatch, tmp_path / "hung")
    verify = win.verify_view
    verify.runner.start("verify", {"package": str(tmp_path / "p")})
    pids = wait_hung(tmp_path / "hung")
    try:
        asked: list[str] = []
        _answer("Quit and stop it", asked)
        event = _WindowManagerClose()
        QApplication.sendEvent(win, event)
        assert "verification is running" in asked[0].lower()
        assert event.isAccepted() and not verify.runner.running
        assert not any(alive(pid) for pid in pids)
    finally:
        end(pids)


# -- 3. after a restart ------------------------------------------------------------------


def _package(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "genai_config.json").write_text(json.dumps({"model": {"type": "qwen2_5_vl"}}))
    return folder


def _loaded(chat, package: Path, conversation_id: str) -> None:
    """The chat worker's `ready` for `package` holding the saved conversation."""
    conversation = chat.store.load(conversation_id)
    info = SessionInfo(str(package), "qwen2_5_vl", True, False, "cpu", 0.1, 1, conversation)
    chat.bridge.ready.emit(info)


def test_a_restart_comes_back_to_the_page_the_conversation_and_its_package(
    qtbot, profile, tmp_path, monkeypatch
):
    win = _start(qtbot, profile)
    chat = win.chat_view
    pkg = _package(tmp_path / "library" / "demo-f32")
    saved = _saved(chat.store.root, "Cats", pkg)
    chat.refresh_conversations()
    win.show_page(chat)
    _loaded(chat, pkg, saved)
    assert win.state.loaded_package == str(pkg)
    _quit(win)

    asked: list[tuple] = []
    monkeypatch.setattr(bridge.ChatBridge, "load", lambda self, *a: asked.append(a))
    again = _start(qtbot, profile)
    chat = again.chat_view
    assert again.current_page() is chat
    assert asked == [(pkg, "cpu", chat.store.root, saved)]  # loading it, continuing it
    assert chat.conversation is not None and chat.conversation.id == saved
    assert chat.conversation_list.current_title() == "Cats"
    assert chat.package.text() == str(pkg)
    again.close()


def test_a_restart_whose_package_is_gone_says_so_and_shows_the_conversation(
    qtbot, profile, tmp_path, monkeypatch
):
    win = _start(qtbot, profile)
    chat = win.chat_view
    pkg = _package(tmp_path / "library" / "demo-f32")
    saved = _saved(chat.store.root, "Cats", pkg)
    chat.refresh_conversations()
    win.show_page(win.verify_view)
    _loaded(chat, pkg, saved)
    _quit(win)
    shutil.rmtree(pkg)  # deleted while the app was closed

    asked: list[tuple] = []
    monkeypatch.setattr(bridge.ChatBridge, "load", lambda self, *a: asked.append(a))
    again = _start(qtbot, profile)
    chat = again.chat_view
    assert again.current_page() is again.verify_view
    assert asked == []
    assert "demo-f32" in chat.info.text() and "no longer there" in chat.info.text()
    assert chat.conversation is not None and chat.conversation.id == saved  # still readable
    assert "no longer there" in chat.continue_note.text()
    again.close()


def test_a_restart_with_hostile_settings_starts_plainly(qtbot, profile, caplog):
    settings = QSettings(str(profile), QSettings.Format.IniFormat)
    settings.setValue("page", "../../etc")
    settings.setValue("chat/conversation", "../../../etc/passwd")
    settings.setValue("chat/loaded", ["a", "list"])
    settings.sync()
    with caplog.at_level(logging.WARNING):
        win = _start(qtbot, profile)
    assert win.current_page() is win.model_view
    assert win.chat_view.conversation is None
    win.close()


# -- 4. Find a model → Use this model ------------------------------------------------------


def test_use_this_model_replaces_the_card_and_convert_never_takes_the_previous_one(
    qtbot, window, tiny, monkeypatch
):
    """The card stayed the previous model's, Convert → stayed enabled, and the Convert
    page converted the previous model."""
    model, convert = window.model_view, window.convert_view
    before = str(tiny("qwen2_5_vl"))
    model.source.setText(before)
    with qtbot.waitSignal(window.state.profile_changed, timeout=LONG):
        model.inspect_button.click()
    qtbot.waitUntil(lambda: not model.runner.running and model.inspect_button.isEnabled())
    assert model.next_button.isEnabled()
    browser = model.find_model()
    browser.known.setCurrentRow(0)
    chosen = browser.known.currentItem().data(0x0100)
    browser.use_button.click()
    assert model.source.text() == chosen
    # The previous model's card no longer stands for the choice: Convert → waits for the
    # chosen one, which is being read (offline here: it fails, and says so).
    assert not model.next_button.isEnabled()
    assert chosen in model.card.toPlainText()
    started: list[dict] = []
    monkeypatch.setattr(convert.runner, "start", lambda job, args: started.append(args))
    monkeypatch.setattr("mmforge.gui.convert_view.show_error", lambda *a, **k: None)
    convert.convert()
    assert not any(args.get("source") == before for args in started)
    qtbot.waitUntil(lambda: not model.runner.running, timeout=LONG)
    assert not model.next_button.isEnabled()
    convert.convert()
    assert not any(args.get("source") == before for args in started)
    # Picking the previous model again makes it the choice again (read once more).
    model.source.setText(before)
    with qtbot.waitSignal(window.state.profile_changed, timeout=LONG):
        model.inspect_button.click()
    qtbot.waitUntil(lambda: not model.runner.running and model.inspect_button.isEnabled())
    assert model.next_button.isEnabled()
    convert.convert()
    assert started[-1]["source"] == before
