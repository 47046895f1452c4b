"""Loading a package on the chat page: Load, Chat with it →, ready, closed.

`ChatLoading` is one part of `ChatView` (the page's other parts are in `chat_view` and
`chat_conversations`); the Package row itself is `package_bar.PackageBar`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Slot
from PySide6.QtWidgets import QWidget

from mmforge.backend.chat.values import SessionInfo
from mmforge.backend.library import approximation, model_name
from mmforge.gui.chat_column import input_hint
from mmforge.gui.chat_turns import is_demo, same_package
from mmforge.gui.errors import show_error

if TYPE_CHECKING:
    from PySide6.QtWidgets import QComboBox, QLabel, QLineEdit, QPushButton

    from mmforge.backend.chat.conversations import Conversation, ConversationStore
    from mmforge.gui.bridge import ChatBridge
    from mmforge.gui.chat_input import ChatInput, StatusLine
    from mmforge.gui.package_bar import PackageBar
    from mmforge.gui.state import AppState


# Typed as the page it is part of; a plain class at run time (Qt sees only `ChatView`).
if TYPE_CHECKING:
    _Page = QWidget
else:
    _Page = object


class ChatLoading(_Page):
    """The chat page's package: load it in a worker, and follow the worker's life."""

    if TYPE_CHECKING:  # what the page (`ChatView`) holds and does
        state: AppState
        store: ConversationStore
        bridge: ChatBridge
        package_bar: PackageBar
        package: QLineEdit
        ep: QComboBox
        load_button: QPushButton
        info: QLabel
        status: StatusLine
        input: ChatInput
        conversation: Conversation | None
        local: bool
        session_info: SessionInfo | None
        _loaded: bool
        _loaded_written: int | None

        def _show_local(self, conversation: Conversation | None) -> None: ...
        def _on_conversation(self, conversation: Conversation) -> None: ...
        def _update_buttons(self) -> None: ...

    @Slot()
    def load(self, conversation: str | None = None) -> None:
        """Load the package in the Package field in a chat worker.

        `conversation`: the saved conversation to continue (default: a new one).
        """
        package = self.package.text().strip()
        if not package:
            show_error(self, {"message": "Pick a package", "hint": "Convert a model first"})
            return
        self._loaded = False
        self.session_info = None
        if self.conversation is not None and not self.local:
            # The worker goes: what it held is the saved copy now (or nothing, if empty).
            self._show_local(self.conversation if self.conversation.messages else None)
        self.package_bar.say(f"Loading {package}…")
        self.status.setText(f"Loading {Path(package).name}…")
        self.load_button.setEnabled(False)
        self._update_buttons()
        self.bridge.load(
            Path(package), self.ep.currentText(), self.store.root, conversation or None
        )

    def chat_with(self, package: str) -> None:
        """Chat with this package: load it unless it is the one loaded (Chat with it →)."""
        self.package.setText(package)
        info = self.session_info
        if (
            self._loaded
            and info is not None
            and same_package(info.package, package)
            and _written_at(Path(package)) == self._loaded_written
        ):
            self.input.setFocus()
            return
        self.load()  # another package, or this one converted again since it was loaded

    @Slot(str)
    def _package_changed(self, package: str) -> None:
        """Another page picked a package: named here; the loaded one answers until Load."""
        self.package.setText(package)
        info = self.session_info
        if self._loaded and info is not None and not same_package(info.package, package):
            self.package_bar.say(
                f"{Path(info.package).name} is loaded; press Load to chat with "
                f"{Path(package).name} instead."
            )

    @Slot(object)
    def _on_ready(self, info: SessionInfo) -> None:
        self.session_info = info
        self._loaded = True
        self.state.loaded_package = str(info.package)
        self._loaded_written = _written_at(Path(info.package))
        self.load_button.setEnabled(True)
        self.status.setText("")
        caps = ["images"] if info.vision else []
        caps += ["audio"] if info.audio else []
        text = (
            f"{Path(info.package).name}: {model_name(info.package, info.pipeline_type)} on "
            f"{info.ep.upper()}, loaded in {info.load_s:.2f} s, "
            f"{info.load_memory_bytes / 1e6:.0f} MB; takes {' and '.join(caps) or 'text only'}."
        )
        if is_demo(Path(info.package)):
            text += (
                "\nThis is the random-weight demo model: it talks nonsense by design, "
                "while its parity with the original is exact."
            )
        differs = approximation(info.package, short=True)
        if differs is not None:
            text += f"\nAn approximation you agreed to when converting: {differs}."

        self.info.setText(text)
        self.input.setPlaceholderText(input_hint(info.vision, info.audio))
        self._on_conversation(info.conversation)
        self.input.setFocus()  # typing after Load goes into the message box

    @Slot()
    def _on_closed(self) -> None:
        self.session_info = None
        self._loaded = False
        self.state.loaded_package = ""
        self.load_button.setEnabled(True)
        if self.status.text().startswith("Loading"):
            self.status.setText("")
        if self.conversation is not None and not self.local:
            self._show_local(self.conversation if self.conversation.messages else None)
        self._update_buttons()


def _written_at(package: Path) -> int | None:
    """When a package was last written (its genai_config.json), to see it converted again."""
    try:
        return (package / "genai_config.json").stat().st_mtime_ns
    except OSError:
        return None
