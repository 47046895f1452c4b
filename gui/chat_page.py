"""What the chat page shows and allows, as one Qt-free object the widgets subscribe to.

The chat page's widgets used to keep this state in attributes spread over three mixins
(`ChatView`, `ChatLoading`, `ChatConversations`) that shared `self`, and each decided
for itself which buttons a state allows. Here it is in one place: the conversation shown
and whether the worker holds it, the turn in flight, the session, loading, busy and
editing; what each button may do is derived from it (`allowed`), and every change is
told to the subscribers (the page redraws its buttons). No Qt: tests drive it directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from mmforge.backend.chat.conversations import Conversation, Message
from mmforge.backend.chat.values import SessionInfo
from mmforge.gui.chat_turns import Pending, last_user, messages_of, tail_from_last_user


@dataclass(frozen=True)
class Allowed:
    """What the page's controls may do in a state."""

    send: bool
    regenerate: bool
    edit: bool
    stop: bool
    unload: bool
    manage: bool  # rename and delete the shown conversation
    new: bool
    export: bool


@dataclass
class ChatPage:
    """The chat page's state.

    Attributes:
        conversation: What the worker last reported, or what was read from disk.
        local: The conversation shown is read from disk, not held by the worker.
        pending: The turn in flight (until the worker reports the conversation it made).
        session: The loaded package's session (None: nothing loaded).
        loaded: A package is loaded and ready.
        busy: The worker is running a request.
        editing: Edit last is under way (the input holds the last message).
    """

    conversation: Conversation | None = None
    local: bool = False
    pending: Pending | None = None
    session: SessionInfo | None = None
    loaded: bool = False
    busy: bool = False
    editing: bool = False
    _listeners: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call `listener` after every change."""
        self._listeners.append(listener)

    def __setattr__(self, name: str, value: Any) -> None:
        changed = not name.startswith("_") and getattr(self, name, object()) is not value
        super().__setattr__(name, value)
        if changed and hasattr(self, "_listeners"):
            for listener in list(self._listeners):
                listener()

    def update(self, **changes: Any) -> None:
        """Change several fields at once; subscribers hear once."""
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise AttributeError(f"ChatPage has no {', '.join(sorted(unknown))}")
        for name, value in changes.items():
            object.__setattr__(self, name, value)
        for listener in list(self._listeners):
            listener()

    @property
    def ready(self) -> bool:
        """A message may be sent: a loaded model holds the shown conversation, idle."""
        return self.loaded and not self.busy and not self.local

    @property
    def messages(self) -> list[Message]:
        """The shown conversation's messages."""
        return messages_of(self.conversation)

    @property
    def hidden(self) -> int:
        """Messages at the end left out of the transcript (the turn Edit last replaces)."""
        if self.editing and self.pending is None:
            return tail_from_last_user(self.messages)
        return 0

    def allowed(self) -> Allowed:
        """What the controls may do now."""
        messages = self.messages
        shown = self.conversation is not None and not self.busy
        titled = bool(self.conversation is not None and self.conversation.title)
        return Allowed(
            send=self.ready,
            regenerate=self.ready and bool(messages),
            edit=self.ready and last_user(messages) is not None,
            stop=self.loaded and self.busy,
            unload=self.loaded and not self.busy,
            manage=shown and bool(messages or titled),
            new=not self.busy,
            export=shown and bool(messages),
        )
