"""Issue 25: an app a non-developer lives in (each test names its item)."""

from __future__ import annotations

import shutil
from pathlib import Path

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QApplication, QInputDialog, QMessageBox, QToolButton

from mmforge import resources
from mmforge.backend.attachments import IMAGE
from mmforge.backend.chat.conversations import ConversationStore, Message
from tests.gui.chatting import LONG, load, send, settled, typed_in


def _errors(win):
    return [w for w in win.findChildren(QMessageBox) if w.objectName() == "errorDialog"]


def test_1_chat_with_it_loads_the_package_it_names(qtbot, window, package, tmp_path):
    """One package loaded; a second converted; "Chat with it →" answers with the second."""
    first = tmp_path / "first"
    second = tmp_path / "second"
    shutil.copytree(package("qwen2_5_vl"), first)
    shutil.copytree(package("qwen2_5_vl"), second)
    chat = window.chat_view
    load(qtbot, chat, first)
    window.state.set_package(str(second))  # what a finished conversion does
    assert "press Load" in chat.info.text()  # the field changed; the old model is named
    window.convert_view.chat_button.setEnabled(True)
    with qtbot.waitSignal(chat.bridge.ready, timeout=LONG):
        window.convert_view.chat_button.click()
        assert window.current_page() is chat and "Loading" in chat.info.text()
    assert chat.session_info.package == str(second)
    chat.max_tokens.setValue(4)
    send(qtbot, chat, "Hello.")
    assert chat.conversation.package == str(second)
    # Pressing it again with that package loaded keeps the session (no reload).
    with qtbot.assertNotEmitted(chat.bridge.ready, wait=300):
        window.convert_view.chat_button.click()


def test_2_saved_conversations_need_no_model_and_offer_to_load_theirs(
    qtbot, window, package, tmp_path, monkeypatch
):
    pkg = tmp_path / "pkg"
    shutil.copytree(package("qwen2_5_vl"), pkg)
    chat = window.chat_view
    window.show_page(chat)
    store = ConversationStore(chat.store.root)
    saved = store.new(pkg)
    saved.title = "Cats"
    saved.messages += [Message("user", "Tell me about cats."), Message("assistant", "Meow.")]
    store.save(saved)
    chat.refresh_conversations()
    # Nothing is loaded: clicking it shows it, with the way to continue.
    item = chat.conversation_list.item_for(saved.id)
    chat.conversations.itemClicked.emit(item)
    assert "Meow." in chat.transcript.toPlainText() and chat.conversation.id == saved.id
    assert chat.conversation_list.current_title() == "Cats"
    assert chat.continue_bar.isVisible() and "Load pkg" in chat.continue_button.text()
    assert not chat.send_button.isEnabled()
    # Rename and export with no model.
    monkeypatch.setattr(QInputDialog, "exec", typed_in("Cat facts"))
    chat.conversation_list.rename_button.click()
    assert store.load(saved.id).title == "Cat facts"
    assert chat.conversation_list.current_title() == "Cat facts"
    chat.export_to(tmp_path / "cats.md", as_json=False)
    assert "Meow." in (tmp_path / "cats.md").read_text()
    # Continue: its package loads with it, and the model answers in it.
    with qtbot.waitSignal(chat.bridge.ready, timeout=LONG):
        chat.continue_button.click()
    assert chat.session_info.package == str(pkg) and chat.conversation.id == saved.id
    assert not chat.continue_bar.isVisible() and chat.send_button.isEnabled()
    chat.max_tokens.setValue(3)
    send(qtbot, chat, "And dogs?")
    assert len(store.load(saved.id).messages) == 4
    # Delete with no model (closed): asked, then gone.
    chat.bridge.close()
    qtbot.waitUntil(lambda: not chat._loaded)
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    chat.conversation_list.delete_button.click()
    assert store.list() == [] and chat.conversation is None
    assert not _errors(window)


def test_2_a_failed_load_keeps_the_highlight_and_the_transcript_together(
    qtbot, window, package, tmp_path
):
    chat = window.chat_view
    load(qtbot, chat, package("qwen2_5_vl"))
    chat.max_tokens.setValue(3)
    send(qtbot, chat, "Hi.")
    shown = chat.conversation.id
    chat.package.setText(str(tmp_path / "nothing-here"))
    with qtbot.waitSignal(chat.bridge.failed, timeout=LONG):
        chat.load_button.click()
    current = chat.conversations.currentItem()
    assert current.data(Qt.ItemDataRole.UserRole) == shown == chat.conversation.id
    assert "Hi." in chat.transcript.toPlainText() and "Not loaded" in chat.info.text()
    for box in _errors(window):
        box.close()


def test_3_a_conversation_past_the_context_shows_where_the_model_stops_seeing(qtbot, window):
    from mmforge.backend.chat.conversations import Conversation

    chat = window.chat_view
    box = chat.settings_box
    assert box.context_full.currentData() == "drop"  # the default: keep answering
    assert box.options()["context_full"] == "drop"
    box.context_full.setCurrentIndex(box.context_full.findData("stop"))
    assert box.options()["context_full"] == "stop"
    messages = [Message("user", "first"), Message("assistant", "one")] * 2
    chat._show_local(Conversation(id="x", package="p", messages=messages, forgotten=2))
    text = chat.transcript.toPlainText()
    assert "no longer in the model's view" in text
    assert text.index("one") < text.index("no longer") < text.rindex("first")


def test_4_clicking_the_new_conversation_in_the_list_says_nothing_wrong(qtbot, window, package):
    chat = window.chat_view
    load(qtbot, chat, package("qwen2_5_vl"))
    item = chat.conversations.item(0)
    assert chat.conversation_list.current_title() == "New conversation"
    with qtbot.assertNotEmitted(chat.bridge.failed, wait=1500):
        chat.conversations.itemClicked.emit(item)
        chat.conversations.itemActivated.emit(item)
    assert not _errors(window)


def test_6_the_window_fits_small_screens(qtbot, window):
    """Every page is usable at 1024×600: rows scroll instead of being cut off."""
    screen = window.screen().availableGeometry()
    assert window.width() <= screen.width() and window.height() <= screen.height()
    window.resize(1024, 600)
    for page, widget in (
        (window.model_view, window.model_view.next_button),
        (window.convert_view, window.convert_view.convert_button),
        (window.chat_view, window.chat_view.send_button),
    ):
        window.show_page(page)
        QApplication.processEvents()
        scroll = window.pages.currentWidget()
        scroll.ensureWidgetVisible(widget)
        QApplication.processEvents()
        corner = widget.mapTo(window, widget.rect().bottomRight())
        assert window.rect().contains(corner), (page, corner)
    # With its settings open the chat page grew wider than the screen: Load, Stop and Send
    # went off to the right behind a sideways scroll bar.
    window.show_page(window.chat_view)
    window.chat_view.settings_button.setChecked(True)
    QApplication.processEvents()
    scroll = window.pages.currentWidget()
    assert scroll.horizontalScrollBar().maximum() == 0
    window.chat_view.settings_button.setChecked(False)


def test_7_keyboard_load_focus_and_esc_anywhere(qtbot, window, package, monkeypatch):
    chat = window.chat_view
    window.show_page(chat)
    window.activateWindow()
    chat.package.setText(str(package("qwen2_5_vl")))
    chat.package.setFocus()
    with qtbot.waitSignal(chat.bridge.ready, timeout=LONG):
        qtbot.keyClick(chat.package, Qt.Key.Key_Return)  # item 9: Enter in the field loads
    assert QApplication.focusWidget() is chat.input  # typing goes into the message
    stopped = []
    monkeypatch.setattr(chat.bridge, "stop", lambda: stopped.append(True))
    chat._busy = True
    chat.transcript.setFocus()
    qtbot.keyClick(chat.transcript, Qt.Key.Key_Escape)
    assert stopped
    chat._busy = False


def test_8_a_large_answer_cap_and_wrapped_code(qtbot, window):
    from mmforge.backend.chat.conversations import Conversation

    chat = window.chat_view
    assert chat.max_tokens.value() >= 2048
    code = "x = [" + ", ".join(str(i) for i in range(200)) + "]"
    messages = [Message("user", "code?"), Message("assistant", f"```python\n{code}\n```\n")]
    window.show_page(chat)
    window.resize(1024, 600)
    chat._show_local(Conversation(id="c", package="p", messages=messages))
    QApplication.processEvents()
    assert chat.transcript.horizontalScrollBar().maximum() == 0


def test_9_drops_regenerate_accessible_names_dates_and_search(qtbot, window, package):
    chat = window.chat_view
    load(qtbot, chat, package("qwen2_5_vl"))
    assert not chat.regen_button.isEnabled()  # nothing to regenerate yet
    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(resources.probe_image()))])
    drop = QDropEvent(
        QPointF(20, 20),
        Qt.DropAction.CopyAction,
        data,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    chat.transcript.dropEvent(drop)
    assert chat.strip.files == [(resources.probe_image(), IMAGE)]
    [remove] = chat.strip.findChildren(QToolButton)
    assert remove.accessibleName() == "Remove probe.png"
    chat.strip.set_files([])
    chat.max_tokens.setValue(3)
    send(qtbot, chat, "Hello there.")
    assert chat.regen_button.isEnabled()
    with settled(qtbot, chat):
        chat.conversation_list.new_button.click()
    send(qtbot, chat, "Something else.")
    chat.refresh_conversations()
    texts = [chat.conversations.item(i).text() for i in range(chat.conversations.count())]
    assert all("today" in t for t in texts), texts
    chat.conversation_list.search.setText("hello")
    shown = [
        chat.conversations.item(i).data(Qt.ItemDataRole.UserRole + 1)
        for i in range(chat.conversations.count())
        if not chat.conversations.item(i).isHidden()
    ]
    assert shown == ["Hello there."]


def test_13_help_lists_the_keyboard_shortcuts(qtbot, window):
    window.shortcuts_action.trigger()
    [box] = [w for w in window.findChildren(QMessageBox) if w.objectName() == "shortcuts"]
    assert "Ctrl+N" in box.text() and "Esc" in box.text()
    box.close()


def test_dark_fields_and_check_boxes_can_be_seen(window):
    """Fusion outlined fields and check boxes a shade darker than a dark page (1.1:1): an
    empty check box and a text field could not be told from the page."""
    import re

    from PySide6.QtGui import QColor, QPalette

    app = QApplication.instance()
    window.set_appearance("dark")
    sheet = app.styleSheet()
    page = app.palette().color(QPalette.ColorRole.Window)
    outline = QColor(
        re.search(r"QCheckBox::indicator, [^{]*\{[^}]*border: 1px solid (#\w+)", sheet)[1]
    )
    assert outline.lightness() - page.lightness() > 100
    check = re.search(r"image: url\(([^)]+)\)", sheet)[1]
    assert Path(check).is_file()
    window.set_appearance("system")
    assert app.styleSheet() == ""
