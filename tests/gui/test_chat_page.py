"""The chat page's state without Qt (issue 31: one Qt-free model the widgets subscribe to)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mmforge.backend.chat.conversations import Conversation, Message
from mmforge.gui.chat_page import ChatPage
from mmforge.gui.chat_turns import Pending


def _turns() -> Conversation:
    return Conversation(
        id="c", package="p", messages=[Message("user", "Hi"), Message("assistant", "Hello")]
    )


def test_the_page_state_module_needs_no_qt():
    code = "import sys, mmforge.gui.chat_page; assert 'PySide6' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_what_each_state_allows():
    page = ChatPage()
    nothing = page.allowed()
    assert not (nothing.send or nothing.regenerate or nothing.edit or nothing.stop)
    assert not nothing.unload and nothing.new and not nothing.export
    page.update(conversation=_turns(), loaded=True)
    idle = page.allowed()
    assert idle.send and idle.regenerate and idle.edit and idle.unload and idle.export
    page.busy = True
    busy = page.allowed()
    assert busy.stop and not (busy.send or busy.regenerate or busy.unload or busy.new)
    page.update(busy=False, local=True)  # a saved conversation the model does not hold
    saved = page.allowed()
    assert not saved.send and saved.manage and saved.export and saved.unload


def test_edit_last_hides_the_turn_it_replaces_until_the_turn_is_sent():
    page = ChatPage(conversation=_turns(), loaded=True)
    assert page.hidden == 0
    page.editing = True
    assert page.hidden == 2  # the last message and its answer
    page.pending = Pending(replaces=2)
    assert page.hidden == 0  # the turn in flight replaces them now


def test_subscribers_hear_each_change_once():
    page = ChatPage()
    heard: list[bool] = []
    page.subscribe(lambda: heard.append(page.busy))
    page.busy = True
    page.busy = True  # no change, no call
    page.update(busy=False, loaded=True)  # one call for both
    assert heard == [True, False]
    with pytest.raises(AttributeError, match="no bogus"):
        page.update(bogus=1)
