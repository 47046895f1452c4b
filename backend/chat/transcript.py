"""A chat session's transcript: the conversation, and the exact ids each message added.

The ids (`segments`) and the chat-template text up to each message's end (`end_texts`)
are what let a later turn continue the generator instead of prefilling the history again
(`generation.GeneratorDriver.feed`). None marks a message whose ids are not known (a
conversation opened from disk, a history re-tokenized with its attachments).

Messages before `Conversation.forgotten` are out of the model's view (the context policy
dropped them); they stay saved and shown.
"""

from __future__ import annotations

import logging
from typing import Any

from mmforge.backend.attachments import Attachment, check_saved
from mmforge.backend.chat import carry
from mmforge.backend.chat.conversations import Conversation, ConversationStore, Message

log = logging.getLogger(__name__)


class Transcript:
    """The open conversation with the ids the model saw for each of its messages."""

    def __init__(self, conversation: Conversation, store: ConversationStore | None):
        self.conversation = conversation
        self.store = store
        self.segments: list[list[int] | None] = []
        self.end_texts: list[str | None] = []
        self.forget_ids()

    @property
    def messages(self) -> list[Message]:
        """The conversation's messages."""
        return self.conversation.messages

    def open(self, conversation: Conversation) -> None:
        """Hold another conversation; none of its ids are known yet."""
        self.conversation = conversation
        self.forget_ids()

    def forget_ids(self) -> None:
        """No message's ids are known (the next turn prefills the history afresh)."""
        n = len(self.messages)
        self.segments = [None] * n
        self.end_texts = [None] * n

    def first(self) -> int:
        """The first message the model sees (those before it were dropped)."""
        return min(self.conversation.forgotten, len(self.messages))

    def attachments(self) -> list[Attachment]:
        """The attachments the model sees (those of dropped turns are out of its view).

        Each is checked as the intake checks a new one before the runtime reads it
        (`attachments.check_saved`): a saved conversation is a file anyone can edit, and
        the runtime opens what it names as it finds it. With a store, every copy must lie
        in the conversation's own folder (`ConversationStore.copy_folders`).

        Raises:
            AttachmentError: A copy that cannot be used, named with why.
        """
        seen = [a for m in self.messages[self.first() :] for a in m.attachments]
        store = self.store
        folders = store.copy_folders(self.conversation) if store is not None else None
        for a in seen:
            check_saved(a, folders)
        return seen

    def drop_oldest(self) -> bool:
        """Take the oldest exchange out of the model's view; False when none can go.

        The last user message (the one being answered) always stays.
        """
        first = self.first()
        users = [i for i, m in enumerate(self.messages) if m.role == "user" and i > first]
        if not users or not any(m.role == "user" for m in self.messages[users[0] :]):
            return False
        self.conversation.forgotten = users[0]
        log.info("context full: the model no longer sees the first %d messages", users[0])
        return True

    def add(
        self, message: Message, segment: list[int] | None = None, end_text: str | None = None
    ) -> None:
        """Append a message, with its ids and template text when known."""
        self.messages.append(message)
        self.segments.append(segment)
        self.end_texts.append(end_text)

    def pop(self) -> Message:
        """Take the last message off."""
        message = self.messages.pop()
        self.segments.pop()
        self.end_texts.pop()
        if self.conversation.forgotten >= len(self.messages):
            # Editing the first message still seen: it comes back into view when resent.
            self.conversation.forgotten = len(self.messages)
        return message

    def restore(self, messages: list[Message]) -> None:
        """Put messages back (their ids unknown) and save."""
        for m in messages:
            self.add(m)
        self.save()

    def save(self) -> None:
        """Save the conversation (a conversation never saved and still empty is not)."""
        if self.store is None:
            return
        if not self.messages and not self.store.saved(self.conversation.id):
            return  # nothing to keep: a first message that failed leaves no conversation
        self.store.save(self.conversation)

    def template_messages(self, n: int | None = None) -> list[dict[str, Any]]:
        """The first `n` messages (all by default) in the chat template's form.

        The system prompt, when there is one, comes first.
        """
        out: list[dict[str, Any]] = []
        system = carry.model_system_text(self.conversation)
        if system:
            out.append({"role": "system", "content": [{"type": "text", "text": system}]})
        for m in self.messages[self.first() : n]:
            parts: list[dict[str, Any]] = [{"type": a.kind} for a in m.attachments]
            parts.append({"type": "text", "text": m.text})
            out.append({"role": m.role, "content": parts})
        return out

    def context_ids(self, messages: int | None = None) -> list[int] | None:
        """The exact ids the model saw for the first `messages` messages (None: unknown)."""
        n = len(self.messages) if messages is None else messages
        segments = self.segments[self.first() : n]
        if any(s is None for s in segments):
            return None
        return [t for s in segments for t in (s or [])]

    def all_ids(self) -> list[int]:
        """Every known id, message by message (unknown ones count as none)."""
        return [t for s in self.segments for t in (s or [])]

    def known_whole(self, ids: list[int], prompt: str) -> None:
        """The history was re-tokenized from text: only the whole is known now."""
        n = len(self.messages)
        # The dropped messages add nothing; the others are known only as a whole.
        self.segments = [[] for _ in range(n - 1)] + [list(ids)]
        self.end_texts = [None] * (n - 1) + [prompt]

    def cut(self, n: int) -> None:
        """Take the first `n` messages off (carried turns the model no longer sees)."""
        del self.messages[:n], self.segments[:n], self.end_texts[:n]
