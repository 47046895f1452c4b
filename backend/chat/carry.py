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
import logging
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from mmforge.backend.attachments import SAVED_HINT, Attachment, SavedCopyError, check_saved
from mmforge.backend.chat.conversations import Conversation, Message, continued_title, short_title

log = logging.getLogger(__name__)

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # POSIX only
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)

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


def adopt_attachments(
    messages: Sequence[Message], dest: Path, folders: Sequence[Path]
) -> list[str]:
    """Copy the messages' attachment files into `dest` and point the messages at the copies.

    A continued conversation keeps its own copies, so that deleting the old one loses
    nothing. A file that is gone stays named by its old path. Each copy is checked first
    as the intake checks a new one (`attachments.check_saved`): the old conversation is a
    file anyone can edit, and could name a FIFO (which blocked the copy), a text file
    posing as a picture, a sparse file of gigabytes or a file outside its folder. Such an
    attachment is left out of the message, and said why.

    Args:
        messages: The new conversation's messages (changed in place).
        dest: The new conversation's folder of copies.
        folders: The folders the old conversation's copies may lie in
            (`ConversationStore.copy_folders` of the old conversation).

    Returns:
        A sentence for each attachment left out, naming it and why.
    """
    left_out: list[str] = []
    for message in messages:
        moved: list[Attachment] = []
        for a in message.attachments:
            if a.path.parent == dest or not os.path.lexists(a.path):
                moved.append(a)
                continue
            try:
                target = _adopt(a, dest, folders)
            except SavedCopyError as e:
                reason = e.reason
                log.warning("carry: not copying %s (%s): %s", a.path, a.name, reason)
                left_out.append(f"{a.name} was left out of the new conversation: {reason}")
                continue
            moved.append(dataclasses.replace(a, path=target))
        message.attachments = moved
    return left_out


def _adopt(a: Attachment, dest: Path, folders: Sequence[Path]) -> Path:
    """Copy one checked attachment into `dest`; the copy's path."""
    checked = check_saved(a, folders)
    dest.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = _free_name(dest, a.path.name)
    # The file checked, opened as it was checked: a link or a FIFO put in its place since
    # is neither followed nor waited on.
    try:
        fd = os.open(checked, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
    except OSError as e:
        raise SavedCopyError(a.path, f"it cannot be read ({e.strerror})", SAVED_HINT) from None
    with open(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            raise SavedCopyError(a.path, "it is not a regular file", SAVED_HINT)
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(out, "wb") as copy:
            shutil.copyfileobj(source, copy)
    return target


def _free_name(dest: Path, name: str) -> Path:
    candidate = dest / name
    n = 1
    while os.path.lexists(candidate):
        n += 1
        candidate = dest / f"{Path(name).stem}-{n}{Path(name).suffix}"
    return candidate
