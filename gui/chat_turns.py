"""The chat page's turn state, without widgets: what is shown while an answer streams."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mmforge.backend.chat.conversations import Conversation, Message


@dataclass
class Pending:
    """The turn in flight, shown until the worker reports the conversation it made.

    Attributes:
        replaces: Messages at the end of the conversation that the turn replaces
            (regenerate: the answer; edit: the last message and its answer).
        user: The user message sent, when the turn sends one.
        answer: The answer streamed so far.
    """

    replaces: int = 0
    user: Message | None = None
    answer: str = ""


def messages_of(conversation: Conversation | None) -> list[Message]:
    """The conversation's messages (none for no conversation)."""
    return conversation.messages if conversation is not None else []


def shown_messages(conversation: Conversation | None, pending: Pending | None) -> list[Message]:
    """The messages drawn: the conversation's, less what the turn in flight replaces."""
    messages = list(messages_of(conversation))
    if pending is not None:
        messages = messages[: len(messages) - pending.replaces]
        if pending.user is not None:
            messages.append(pending.user)
    return messages


def last_user(messages: list[Message]) -> Message | None:
    """The last message the user sent."""
    return next((m for m in reversed(messages) if m.role == "user"), None)


def tail_from_last_user(messages: list[Message]) -> int:
    """How many messages the last user message and what follows it make."""
    for back, m in enumerate(reversed(messages), start=1):
        if m.role == "user":
            return back
    return 0


def same_package(a: str | Path | None, b: str | Path | None) -> bool:
    """Whether two package paths name the same folder."""
    if not a or not b:
        return False
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return str(a) == str(b)


def is_demo(package: Path) -> bool:
    """Whether a package was converted from the built-in demo checkpoint."""
    from mmforge.backend.tiny.demo import is_demo_package

    return is_demo_package(package)
