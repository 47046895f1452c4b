"""The last session, for the next start: the page, the conversation shown, the package loaded.

Written to the settings when the window closes; read back when it opens. The settings
file is text anyone can edit: a value of the wrong type or a conversation id that is a
path trick is ignored with a log line, and a package folder that is gone since is said
on the Chat page's package line, the conversation still shown (to read, rename, export).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmforge.backend.errors import MmforgeError
from mmforge.gui.chat_turns import same_package

if TYPE_CHECKING:
    from mmforge.backend.chat.conversations import Conversation
    from mmforge.gui.chat_view import ChatView
    from mmforge.gui.main_window import MainWindow
    from mmforge.gui.state import AppState

log = logging.getLogger(__name__)

PAGE = "page"
CONVERSATION = "chat/conversation"
LOADED = "chat/loaded"
EP = "chat/ep"


def remember(window: MainWindow) -> None:
    """Write the page shown, the chat's conversation and its loaded package."""
    settings = window.state.settings
    settings.setValue(PAGE, window.pages.currentIndex())
    chat = window.chat_view
    conversation = chat.conversation
    settings.setValue(CONVERSATION, conversation.id if conversation is not None else "")
    info = chat.session_info if chat.page.loaded else None
    settings.setValue(LOADED, str(info.package) if info is not None else "")
    settings.setValue(EP, info.ep if info is not None else "")


def restore(window: MainWindow) -> None:
    """Show the last page and conversation, and load the last package again."""
    state = window.state
    page = state.number(PAGE, 0)
    if 0 <= page < window.pages.count():
        window.go(page)
    else:
        log.warning("setting %s=%r is no page: the first page is shown", PAGE, page)
    _restore_chat(window.chat_view, state)


def _shown_last(chat: ChatView, state: AppState) -> Conversation | None:
    conversation_id = state.text(CONVERSATION, "")
    if not conversation_id:
        return None
    try:
        if not chat.store.saved(conversation_id):
            return None  # a new one, empty when the app closed: never written
        return chat.store.load(conversation_id)
    except MmforgeError as e:  # deleted since, damaged, or not an id at all
        log.warning("the conversation shown last time is not shown: %s", e.user_message)
        return None


def _restore_chat(chat: ChatView, state: AppState) -> None:
    shown = _shown_last(chat, state)
    if shown is not None:
        chat.open_conversation(shown.id)  # at once, with its draft, while the model loads
    loaded = state.text(LOADED, "")
    if not loaded:
        return
    folder = Path(loaded)
    if not (folder / "genai_config.json").is_file():
        chat.package_bar.say(
            f"{folder.name}, loaded when the app last closed, is no longer there "
            f"({loaded}): pick a package from the library, or convert one."
        )
        return
    chat.package.setText(loaded)
    ep = state.text(EP, "")
    if ep and chat.ep.findText(ep) >= 0:
        chat.ep.setCurrentText(ep)
    if shown is not None and same_package(shown.package, loaded):
        chat.load(shown.id)  # the worker continues it
        return
    chat.load()
    if shown is not None:
        # It was shown from disk beside the loaded model: so it is again once that loads.
        def show_again(_: Any) -> None:
            chat.bridge.ready.disconnect(show_again)
            chat.open_conversation(shown.id)

        chat.bridge.ready.connect(show_again)
