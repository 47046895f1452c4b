"""Drafts: each conversation's unsent message, kept on disk until it is sent.

A draft is what the message box holds and the attachments in its strip. It is written a
moment after each change, at once when another conversation is shown, and when the app
quits, to `<data>/drafts/<conversation id>.json`; a conversation not saved yet (a new one,
whose id is another after a restart) has the one `.new.json` (no id begins with a dot).
An emptied or sent draft is removed. Each write is the conversations' own
(`conversations.write_private`): a crash leaves the previous draft or the new one, never
a torn file. Pictures pasted into a draft are kept beside it (`pasted/`), since the
clipboard they came from is gone after a restart.

A draft file is a stranger's file, as a conversation is: it is read through the one
reader of untrusted JSON and each field is checked; one that does not read is left out
with a log line, and an attachment that is not a plain file is never opened.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Slot

from mmforge.backend.attachments import AUDIO, IMAGE, kind_of
from mmforge.backend.chat.conversations import remove_orphan_temps, write_private
from mmforge.backend.errors import MmforgeError
from mmforge.backend.json_fields import Fields
from mmforge.backend.untrusted import read_json_file
from mmforge.gui.safe_text import is_regular_file

if TYPE_CHECKING:
    from mmforge.gui.chat_view import ChatView

log = logging.getLogger(__name__)

FORMAT = 1
NEW = ".new"  # the draft of a conversation not saved yet
LIMIT = 16 << 20  # bytes of a draft file: far past any message typed or pasted
MAX_FILES = 64  # attachments a draft keeps
SAVE_AFTER_MS = 300  # a pause in typing this long writes the draft
PASTED = "pasted"
PASTED_KEPT_S = 86_400.0  # a pasted picture no draft names goes after a day


@dataclass(frozen=True)
class Draft:
    """An unsent message: its text and its attachments (path, "image" | "audio")."""

    text: str = ""
    files: tuple[tuple[Path, str], ...] = ()

    @property
    def empty(self) -> bool:
        """Nothing typed and nothing attached."""
        return not self.text and not self.files


class Drafts:
    """The drafts on disk under one folder (made private, 0700, when first written)."""

    def __init__(self, root: Path):
        self.root = root

    def file_for(self, conversation_id: str | None) -> Path:
        """The draft file of a conversation (None: the one not saved yet).

        Raises:
            MmforgeError: Not a conversation id (a path trick).
        """
        if not conversation_id:
            return self.root / f"{NEW}.json"
        if "/" in conversation_id or "\\" in conversation_id or conversation_id.startswith("."):
            raise MmforgeError(f"Not a conversation id: {conversation_id!r}")
        return self.root / f"{conversation_id}.json"

    def save(self, conversation_id: str | None, draft: Draft) -> None:
        """Write the draft atomically; an empty one removes the file.

        Raises:
            OSError: The disk refused it (the previous draft stays as it was).
        """
        path = self.file_for(conversation_id)
        if draft.empty:
            path.unlink(missing_ok=True)
            return
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = {
            "format": FORMAT,
            "text": draft.text,
            "attachments": [{"path": str(p), "kind": k} for p, k in draft.files],
        }
        remove_orphan_temps(self.root, path.name)
        write_private(path, json.dumps(data, ensure_ascii=False))

    def load(self, conversation_id: str | None) -> Draft:
        """The saved draft (an empty one when there is none or it does not read)."""
        path = self.file_for(conversation_id)
        if not os.path.lexists(path):
            return Draft()
        try:
            f = Fields(read_json_file(path, "drafts", limit=LIMIT), str(path))
            text = f.text("text", "")
            listed = [
                (a.text("path"), a.choice("kind", (IMAGE, AUDIO))) for a in f.objects("attachments")
            ]
        except MmforgeError as e:
            log.warning("draft %s left out: %s", path, e.user_message)
            return Draft()
        except (ValueError, LookupError, TypeError, ArithmeticError, RecursionError) as e:
            log.warning("draft %s left out: %s", path, e)
            return Draft()
        files = []
        for name, kind in listed[:MAX_FILES]:
            file = Path(name)
            # Only a plain file of the kind its name says (a FIFO or device would block).
            if file.is_absolute() and kind_of(file) == kind and is_regular_file(file):
                files.append((file, kind))
            else:
                log.warning(
                    "draft %s: attachment %r left out (not a picture or sound file)", path, name
                )
        return Draft(text, tuple(files))

    def forget(self, conversation_id: str | None) -> None:
        """Remove a conversation's draft (it was deleted)."""
        with contextlib.suppress(OSError, MmforgeError):
            self.file_for(conversation_id).unlink(missing_ok=True)

    def pasted_file(self) -> Path:
        """A new file name for a picture pasted into a draft (its folder made, 0700)."""
        folder = self.root / PASTED
        name = f"pasted-{uuid.uuid4().hex[:12]}.png"
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            log.warning("pasted pictures go to the temporary folder: %s", e)
            return Path(tempfile.gettempdir()) / name  # attached now, not after a restart
        return folder / name

    def prune_pasted(self) -> None:
        """Remove pasted pictures that no draft names and that are over a day old.

        A sent message's pictures are copied into its conversation; a day leaves alone what
        another window of the app has just pasted.
        """
        folder = self.root / PASTED
        if not folder.is_dir():
            return
        named: set[str] = set()
        for draft in self.root.glob("*.json"):
            stem = draft.name.removesuffix(".json")
            named |= {str(p) for p, _ in self.load(None if stem == NEW else stem).files}
        now = time.time()
        with contextlib.suppress(OSError):
            for picture in folder.iterdir():
                old = now - picture.lstat().st_mtime > PASTED_KEPT_S
                if old and str(picture) not in named and picture.is_file():
                    picture.unlink(missing_ok=True)


class DraftKeeper(QObject):
    """Keeps the chat page's message box and strip as the shown conversation's draft.

    It follows the page (`ChatPage`): when another conversation is shown, the draft typed
    stays with the one it was typed in and the new one's comes back. While Edit last is
    under way the box holds the last message, not a draft: nothing is written then, and
    the draft it covered comes back after the edit.
    """

    def __init__(self, view: ChatView):
        super().__init__(view)
        self.view = view
        self._timer = QTimer(self, singleShot=True, interval=SAVE_AFTER_MS)
        self._timer.timeout.connect(self.save_now)
        self._filling = False  # the box is being filled from a draft: no change to save
        self._shown = self._shown_id()
        self._key = self._key_now()
        self._editing = view.page.editing
        view.input.textChanged.connect(self._changed)
        view.strip.changed.connect(self._changed)
        view.page.subscribe(self._follow)
        self._fill(self.store.load(self._key))
        with contextlib.suppress(OSError):
            self.store.prune_pasted()

    @property
    def store(self) -> Drafts:
        """The drafts beside the conversations the page reads (the self-test swaps those)."""
        return Drafts(self.view.store.root.parent / "drafts")

    def _shown_id(self) -> str | None:
        conversation = self.view.page.conversation
        return conversation.id if conversation is not None else None

    def _key_now(self) -> str | None:
        """The draft's key: the shown conversation's id once it is saved, else None."""
        shown = self._shown_id()
        try:
            return shown if shown and self.view.store.saved(shown) else None
        except MmforgeError:
            return None

    def _draft(self) -> Draft:
        return Draft(self.view.input.toPlainText(), tuple(self.view.strip.files))

    def _fill(self, draft: Draft) -> None:
        self._filling = True
        try:
            self.view.input.setPlainText(draft.text)
            self.view.strip.set_files(list(draft.files))
        finally:
            self._filling = False
        self._timer.stop()

    @Slot()
    def _changed(self) -> None:
        if not self._filling:
            self._timer.start()

    @Slot()
    def save_now(self) -> None:
        """Write the draft now (not while Edit last holds the box); a failure is said."""
        self._timer.stop()
        if self.view.page.editing:
            return
        self._write(self._key, self._draft())

    def _write(self, key: str | None, draft: Draft) -> None:
        try:
            self.store.save(key, draft)
        except (OSError, MmforgeError) as e:
            log.warning("the draft could not be saved: %s", e)
            self.view.status.setText(f"The draft could not be saved: {e}")

    def forget(self, conversation_id: str) -> None:
        """The conversation is being deleted: its draft goes with it."""
        self.store.forget(conversation_id)
        if conversation_id == self._key:
            # What the box holds is nobody's now; the next conversation shown is a new one.
            self._key = None
            self._fill(self.store.load(None))

    def _follow(self) -> None:
        """After each change of the page: follow the conversation shown and Edit last."""
        editing = self.view.page.editing
        if editing != self._editing:
            self._editing = editing
            if not editing:
                # After the edit's own clearing of the box (`cancel_edit`, `send`).
                QTimer.singleShot(0, self, self._after_edit)
        if editing:
            return
        shown, key = self._shown_id(), self._key_now()
        if key == self._key:
            self._shown = shown
            return
        old, self._key = self._key, key
        if shown == self._shown:
            # The same conversation, saved for the first time: its draft moves with it.
            self._shown = shown
            self._write(key, self._draft())
            self.store.forget(old)
            return
        self._shown = shown
        self._timer.stop()
        if old is None or self.view.store.saved(old):
            self._write(old, self._draft())  # what the box holds was typed there
        else:
            self.store.forget(old)  # deleted meanwhile
        self._fill(self.store.load(key))

    @Slot()
    def _after_edit(self) -> None:
        if not self.view.page.editing and self._draft().empty:
            self._fill(self.store.load(self._key))
