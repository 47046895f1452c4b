"""Going on in a new conversation when one outgrows the model's context.

With `context_full` "carry" or "summary", the message that does not fit starts a new
conversation, titled "Continued: <old title>" and linked to the old one by id. It opens
with the last whole exchanges that fit ("carry"), or with a summary the model writes of
the old conversation in one bounded answer ("summary"), which the model then reads after
the system prompt. The old conversation stays saved as it was before the message.
`ChatSession` drives this; the pieces without a model are here.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Sequence
from pathlib import Path

from mmforge.backend.attachments import Attachment
from mmforge.backend.chat.conversations import Conversation, Message, continued_title, short_title

# The summary is one answer of at most this many tokens (and a quarter of the context).
SUMMARY_TOKENS = 256
SUMMARY_REQUEST = (
    "Our conversation is too long to continue here. Summarise it in a few sentences: "
    "what we talked about, what was decided or found, and anything still open, so that "
    "we can go on from the summary alone."
)
# What the user is told while the model summarises (it takes as long as an answer).
SUMMARISING = (
    "The conversation is full: the model is summarising it, to go on in a new conversation…"
)
# How the model is shown the summary, after the system prompt (if any).
SUMMARY_HEADING = "Summary of the earlier part of this conversation:"


def model_system_text(conversation: Conversation) -> str:
    """What the model reads as the system prompt: the user's own, then any summary."""
    parts = [conversation.system] if conversation.system else []
    if conversation.summary:
        parts.append(f"{SUMMARY_HEADING}\n{conversation.summary}")
    return "\n\n".join(parts)


def begin_continuation(old: Conversation, new: Conversation) -> Conversation:
    """Make `new` the continuation of `old`: its title, link and system prompt."""
    first = next((m.text for m in old.messages if m.role == "user"), "")
    new.title = continued_title(old.title or short_title(first))
    new.continues = old.id
    new.system = old.system
    return new


def copies(messages: Sequence[Message]) -> list[Message]:
    """Copies of messages for another conversation (the originals stay unchanged)."""
    return [dataclasses.replace(m, attachments=list(m.attachments)) for m in messages]


def adopt_attachments(messages: Sequence[Message], dest: Path) -> None:
    """Copy the messages' attachment files into `dest` and point the messages at the copies.

    A continued conversation keeps its own copies, so that deleting the old one loses
    nothing. A file that is gone stays named by its old path.
    """
    for message in messages:
        moved: list[Attachment] = []
        for a in message.attachments:
            if a.path.parent == dest or not a.path.is_file():
                moved.append(a)
                continue
            dest.mkdir(parents=True, exist_ok=True, mode=0o700)
            target = _free_name(dest, a.path.name)
            shutil.copyfile(a.path, target)
            target.chmod(0o600)
            moved.append(dataclasses.replace(a, path=target))
        message.attachments = moved


def _free_name(dest: Path, name: str) -> Path:
    candidate = dest / name
    n = 1
    while candidate.exists():
        n += 1
        candidate = dest / f"{Path(name).stem}-{n}{Path(name).suffix}"
    return candidate
