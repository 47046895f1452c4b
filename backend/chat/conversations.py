"""Saved conversations: one folder each, JSON plus copies of the attachments.

Layout under the root (by default `<user data dir>/conversations`):

    <id>/conversation.json
    <id>/attachments/<files>

Every save writes a temporary file and renames it over the old one, so a crash at any
moment leaves either the previous or the new version, never a torn file. Conversations
hold the user's words and copies of their pictures and recordings: folders are 0700 and
files 0600 from the moment they are made. The chat engine
saves the user's message before generating and the answer when it ends, so a crash
mid-answer loses nothing that was already on screen before it began.

This module imports nothing heavy: the GUI lists and opens conversations in its own
process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mmforge.backend.attachments import Attachment
from mmforge.backend.chat.markdown_export import to_markdown as to_markdown  # its old home
from mmforge.backend.diskspace import no_space, out_of_space
from mmforge.backend.errors import MmforgeError
from mmforge.backend.json_fields import Fields
from mmforge.backend.untrusted import read_json_file

log = logging.getLogger(__name__)

FILE = "conversation.json"
ATTACHMENTS = "attachments"  # the folder of a conversation's attachment copies
FORMAT = 1
CONTINUED = "Continued: "  # the title of a conversation that goes on from a full one

# Bounds of a saved conversation, read as a stranger's file (anyone can edit it): past
# any real one, and small enough that no number stops the app that lists it.
# 128 MB holds some 2,000 turns of 4,096-token answers (12 bytes an id as saved).
LIMIT = 128 << 20
ROLES = ("user", "assistant")
MAX_TOKEN_ID = (1 << 31) - 1  # ids and counts are int32 in the runtime
MAX_MESSAGES = 1 << 31
MAX_FIGURE = 1e9  # seconds, or tokens a second
LATEST = 32_503_680_000.0  # 1 January 3000: a time every platform's clock can show


@dataclass
class Message:
    """One chat message.

    Attributes:
        role: "user" or "assistant".
        text: The message text.
        attachments: Prepared attachments (user messages only).
        token_ids: The answer's token ids (assistant messages only).
        stats: Generation figures for an answer (see `chat.TurnStats`).
        stop_reason: Why an answer ended: "eos", "length" or "stopped".
    """

    role: str
    text: str
    attachments: list[Attachment] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    stop_reason: str = ""

    def to_dict(self, folder: Path | None = None) -> dict[str, Any]:
        """JSON form; attachment paths are written relative to `folder` when inside it."""
        data = asdict(self)
        data["attachments"] = [_attachment_out(a, folder) for a in self.attachments]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], folder: Path | None = None) -> Message:
        """Inverse of `to_dict`.

        Raises:
            MmforgeError: A field is missing or of the wrong type (naming it).
        """
        return cls.from_fields(Fields(data, "a message"), folder)

    @classmethod
    def from_fields(cls, f: Fields, folder: Path | None = None) -> Message:
        """A message from its JSON object, read field by field (`Conversation.from_dict`).

        Raises:
            MmforgeError: A field is missing or of the wrong type (naming it).
        """
        return cls(
            role=f.choice("role", ROLES),
            text=f.text("text", ""),
            attachments=[_attachment_in(a, folder) for a in f.objects("attachments")],
            token_ids=f.wholes("token_ids", high=MAX_TOKEN_ID),
            stats=_stats(f.object("stats")),
            stop_reason=f.text("stop_reason", ""),
        )


def _stats(f: Fields) -> dict[str, Any]:
    """An answer's figures (`chat.TurnStats`), each of its type (the transcript shows them)."""
    stats = dict(f.data)
    for key in ("prompt_tokens", "prefill_tokens", "new_tokens"):
        if key in stats:
            stats[key] = f.whole(key, high=MAX_TOKEN_ID)
    for key in ("time_to_first_token_s", "decode_tokens_per_s", "total_s"):
        if key in stats:
            stats[key] = f.number(key, high=MAX_FIGURE)
    if "prefill" in stats:
        stats["prefill"] = f.text("prefill")
    return stats


def _attachment_out(a: Attachment, folder: Path | None) -> dict[str, Any]:
    data = a.to_dict()
    if folder is not None and a.path.is_relative_to(folder):
        data["path"] = a.path.relative_to(folder).as_posix()
    return data


def _attachment_in(f: Fields, folder: Path | None) -> Attachment:
    """A saved attachment; a relative path is the conversation folder's.

    Where it points is not checked here: `attachments.check_saved` checks the copy before
    anything reads it (it must lie inside the folder, and pass the intake).
    """
    a = Attachment.from_fields(f)
    if folder is not None and not a.path.is_absolute():
        a = dataclasses.replace(a, path=folder / a.path)
    return a


@dataclass
class Conversation:
    """A conversation with one package.

    Attributes:
        id: Folder name under the store root.
        package: The package folder it was held with.
        title: A short title (the first user message, cut).
        created: Seconds since the epoch.
        updated: Seconds since the epoch.
        messages: The messages in order.
        system: The system prompt the model sees before the first message ("" for none).
        forgotten: How many messages at the start the model no longer sees: they were
            dropped to make room when the conversation outgrew the model's context (they
            stay saved and shown, under a marker).
        continues: The id of the conversation this one continues, when that one outgrew
            the model's context ("" for none).
        summary: What the model wrote of the conversation this one continues; the model
            reads it after the system prompt ("" for none).
    """

    id: str
    package: str
    title: str = ""
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    messages: list[Message] = field(default_factory=list)
    system: str = ""
    forgotten: int = 0
    continues: str = ""
    summary: str = ""

    def to_dict(self, folder: Path | None = None) -> dict[str, Any]:
        """JSON form; attachment paths are written relative to `folder` when inside it."""
        return {
            "id": self.id,
            "package": self.package,
            "title": self.title,
            "created": self.created,
            "updated": self.updated,
            "system": self.system,
            "forgotten": self.forgotten,
            "continues": self.continues,
            "summary": self.summary,
            "messages": [m.to_dict(folder) for m in self.messages],
        }

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], folder: Path | None = None, *, where: str = "a conversation"
    ) -> Conversation:
        """Inverse of `to_dict`, each field checked for its type (`where` names the file).

        Raises:
            MmforgeError: A field is missing or of the wrong type (naming it).
        """
        f = Fields(data, where)
        return cls(
            id=f.text("id"),
            package=f.text("package"),
            title=f.text("title", ""),
            created=f.number("created", 0.0, high=LATEST),
            updated=f.number("updated", 0.0, high=LATEST),
            messages=[Message.from_fields(m, folder) for m in f.objects("messages")],
            system=f.text("system", ""),
            forgotten=f.whole("forgotten", 0, high=MAX_MESSAGES),
            continues=f.text("continues", ""),
            summary=f.text("summary", ""),
        )


@dataclass(frozen=True)
class Summary:
    """What a conversation list shows without loading every message."""

    id: str
    title: str
    package: str
    updated: float
    messages: int
    text: str = ""  # what search looks through: the messages' words (bounded)


def default_root() -> Path:
    """`<user data dir>/conversations` (platformdirs)."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("mmforge", appauthor=False)) / "conversations"


class ConversationStore:
    """Conversations on disk under one root folder."""

    def __init__(self, root: Path | None = None):
        self.root = root or default_root()
        self._made: list[Path] = []  # folders this store created, outermost first

    def new(self, package: Path | str) -> Conversation:
        """A new, empty conversation (its folder is made on first save)."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return Conversation(id=f"{stamp}-{uuid.uuid4().hex[:8]}", package=str(package))

    def folder(self, conversation_id: str) -> Path:
        """The conversation's folder (names are checked: no path tricks)."""
        if not conversation_id or "/" in conversation_id or conversation_id.startswith("."):
            raise MmforgeError(
                f"Not a conversation id: {conversation_id!r}", "Pick one from the list"
            )
        return self.root / conversation_id

    def attachments_folder(self, conversation_id: str) -> Path:
        """Where the conversation keeps its attachment copies (made private, 0700)."""
        self._make_folders(self.folder(conversation_id))
        return self.copies(conversation_id)

    def copies(self, conversation_id: str) -> Path:
        """The folder of the conversation's attachment copies (nothing is made)."""
        return self.folder(conversation_id) / ATTACHMENTS

    def copy_folders(self, conversation: Conversation) -> list[Path]:
        """The folders a conversation's attachment copies may lie in.

        Its own, and that of the conversation it continues: it holds that one's turns
        until their copies are its own (`chat.carry.adopt_attachments`), and keeps the old
        path of a copy that was already gone by then.
        """
        folders = [self.copies(conversation.id)]
        with contextlib.suppress(MmforgeError):  # a "continues" that is no id: none
            if conversation.continues:
                folders.append(self.copies(conversation.continues))
        return folders

    def _make_folders(self, folder: Path) -> None:
        """Make the root and a conversation's folder (0700), remembering which were new."""
        for path in [*reversed(folder.parents), folder]:
            if path.is_relative_to(self.root.parent) and not path.exists():
                self._made.append(path)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        folder.mkdir(exist_ok=True, mode=0o700)

    def saved(self, conversation_id: str) -> bool:
        """Whether the conversation has been written."""
        return (self.folder(conversation_id) / FILE).is_file()

    def discard_unsaved(self, conversation_id: str) -> None:
        """Remove a conversation's folder if it was never saved, and folders made for it.

        After a failed first save (a full disk), nothing it wrote stays: its attachment
        copies, its folder, and the store's own folders when they were made for it.
        """
        folder = self.folder(conversation_id)
        if folder.is_dir() and not (folder / FILE).exists():
            shutil.rmtree(folder, ignore_errors=True)
        for path in reversed(self._made):
            with contextlib.suppress(OSError):
                path.rmdir()  # only when empty
        self._made = [p for p in self._made if p.exists()]

    def save(self, conversation: Conversation, *, touch: bool = True) -> None:
        """Write the conversation atomically, private to the user.

        `touch=False` keeps its `updated` time (a rename does not move it up the list).
        """
        folder = self.folder(conversation.id)
        self._make_folders(folder)
        if touch:
            conversation.updated = time.time()
        if not conversation.title:
            first = next((m.text for m in conversation.messages if m.role == "user"), "")
            conversation.title = short_title(first)
        data = {"format": FORMAT, **conversation.to_dict(folder)}
        remove_orphan_temps(folder)
        try:
            write_private(folder / FILE, json.dumps(data, indent=1, ensure_ascii=False))
        except BaseException as e:
            if out_of_space(e):
                self.discard_unsaved(conversation.id)  # a saved one keeps its last copy
                raise no_space("the conversation", folder) from None
            raise

    def load(self, conversation_id: str) -> Conversation:
        """Read one conversation, as a stranger's file: anyone can edit it.

        It is read through the one reader of strangers' JSON (NaN, Infinity, 1e400, a
        FIFO, a file over `LIMIT` or nested past its bound are refused) and each field is
        checked for its type. A conversation is known by its folder's name, whatever
        `id` its file claims (Delete and Rename act on the folder shown).

        Raises:
            MmforgeError: No such conversation, or its file is damaged (naming the field);
                the file is left as it is.
        """
        folder = self.folder(conversation_id)
        path = folder / FILE
        if not os.path.lexists(path):
            raise MmforgeError(
                f"No saved conversation {conversation_id}", "It may have been deleted"
            )
        try:
            data = read_json_file(path, "conversation", limit=LIMIT)
            conversation = Conversation.from_dict(data, folder, where=str(path))
        except MmforgeError as e:
            raise self._damaged(conversation_id, e.user_message) from None
        except (ValueError, LookupError, TypeError, ArithmeticError, RecursionError) as e:
            # Whatever else a damaged or hostile file holds is one unreadable
            # conversation, never a crash of the app that lists it.
            raise self._damaged(conversation_id, str(e)) from None
        conversation.id = conversation_id
        return conversation

    def _damaged(self, conversation_id: str, why: str) -> MmforgeError:
        return MmforgeError(
            f"The saved conversation {conversation_id} is damaged ({why})",
            f"It is left as it is: repair it by hand, or move its folder out of {self.root}",
            details=why,
        )

    def list(self) -> list[Summary]:
        """Every readable conversation, most recently updated first.

        A damaged one is skipped and named in the log; its file stays as it is.
        """
        if not self.root.is_dir():
            return []
        out = []
        for folder in self.root.iterdir():
            if folder.is_dir():
                remove_orphan_temps(folder)
            if not os.path.lexists(folder / FILE):
                continue
            try:
                c = self.load(folder.name)
            except MmforgeError as e:
                log.warning("skipping %s: %s", folder, e.user_message)
                continue
            out.append(Summary(c.id, c.title, c.package, c.updated, len(c.messages), searchable(c)))
        return sorted(out, key=lambda s: s.updated, reverse=True)

    def rename(self, conversation_id: str, title: str) -> Conversation:
        """Give a saved conversation a new title; returns it."""
        conversation = self.load(conversation_id)
        conversation.title = clean_title(title)
        self.save(conversation, touch=False)
        return conversation

    def delete(self, conversation_id: str) -> None:
        """Remove a conversation and its attachment copies."""
        shutil.rmtree(self.folder(conversation_id), ignore_errors=True)


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` atomically, private to the user (0600).

    It goes to `.<name>.<pid>.tmp` beside `path`, reaches the disk, and is renamed over
    `path`: a crash at any moment leaves the previous version or the new one, never a torn
    file, and a failed write leaves no temp file behind (the error is raised).
    """
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # on disk before it replaces the last good copy
        os.replace(tmp, path)
        _sync_folder(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_orphan_temps(folder: Path, name: str = FILE) -> None:
    """Delete the temp files that saves killed mid-write (kill -9, a power cut) left.

    A save writes `.conversation.json.<pid>.tmp` (`.<name>.<pid>.tmp`) and renames it
    into place; a process killed in between leaves it. One whose process is gone is an
    orphan: the file itself is the last copy that was completely written.
    """
    for tmp in folder.glob(f".{name}.*.tmp"):
        pid = tmp.name.removeprefix(f".{name}.").removesuffix(".tmp")
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    from mmforge.backend.processes import process_alive

    return process_alive(pid)  # os.kill(pid, 0) is Ctrl+C on Windows


def _sync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable (POSIX; Windows has no directory handles)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Search reads this much of a conversation's messages: enough for any chat a person
# remembers, bounded so a list of huge conversations stays quick to filter.
SEARCHED_CHARS = 200_000


def searchable(conversation: Conversation) -> str:
    """The text conversation search looks through: the system prompt and every message."""
    parts = [conversation.system, *(m.text for m in conversation.messages)]
    return "\n".join(p for p in parts if p)[:SEARCHED_CHARS].casefold()


def continued_title(title: str) -> str:
    """The title of a conversation that continues one titled `title` (never stacked)."""
    base = title.removeprefix(CONTINUED).strip() or "a conversation"
    return short_title(CONTINUED + base, limit=120)


def clean_title(title: str) -> str:
    """A title a user typed, on one line; an empty one is refused."""
    line = short_title(title, limit=120)
    if not line:
        raise MmforgeError("A conversation needs a title", "Type a few words")
    return line


def short_title(text: str, limit: int = 60) -> str:
    """A title from a message: on one line, cut with "…" past `limit` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
