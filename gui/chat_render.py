"""Drawing the chat page's conversation into its transcript, and streaming an answer in.

A saved conversation is a file anyone can edit, and could name a FIFO (which blocks the
GUI thread that opens it), a text file posing as a picture, a sparse file of gigabytes or
a file outside its folder. So each attachment of the conversation is checked as the
intake checks a new one (`attachments.check_saved`, against the conversation's own
folders of copies) before its picture is drawn or its clip played; one that fails is
named with why. The files of the turn in flight are the user's own, just picked (the
worker's intake checks them): they are drawn as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtGui import QPalette, QTextCursor

from mmforge.backend.attachments import AUDIO, Attachment, SavedCopyError, check_saved, kind_of
from mmforge.backend.chat.conversations import Conversation, ConversationStore, Message
from mmforge.gui.chat_turns import Pending, messages_of, shown_messages
from mmforge.gui.markdown import code_blocks
from mmforge.gui.safe_text import StreamBreaker
from mmforge.gui.theme import colours, stylesheet
from mmforge.gui.transcript import (
    MARK,
    Box,
    Transcript,
    bubble,
    continued_html,
    empty_html,
    forgotten_html,
    message_html,
    summary_html,
)

# The folders a conversation's attachment copies may lie in (`ConversationStore.copy_folders`).
CopyFolders = Callable[[Conversation], Sequence[Path]]


class TranscriptWriter:
    """What the transcript shows: a whole redraw, or the streamed answer's next piece.

    Streaming costs one text insertion per token, inside the open answer's bubble; the
    Markdown render of the whole answer happens once, when it ends (re-rendering per token
    stalled the window).

    `copy_folders` gives the folders a conversation's attachment copies may lie in: those
    of the store the chat page reads now (default: the default store's).
    """

    def __init__(self, transcript: Transcript, copy_folders: CopyFolders | None = None):
        self.transcript = transcript
        self.copy_folders = copy_folders or ConversationStore().copy_folders
        self.shown: list[Message] = []  # the messages drawn, as their Copy links count them
        self._folders: Sequence[Path] = []  # those of the conversation drawn
        self._fresh: set[Path] = set()  # the files of the turn in flight (the user's own)
        self._cursor: QTextCursor | None = None
        self._breaker = StreamBreaker()

    def draw(
        self,
        conversation: Conversation | None,
        pending: Pending | None,
        *,
        loaded: bool,
        palette: QPalette,
        streaming: bool = False,
        hide: int = 0,
        named: str = "",
    ) -> None:
        """Redraw the transcript.

        While `streaming`, the answer in flight is an open bubble whose text grows as
        tokens arrive (see `stream`). `hide`: messages at the end left out (the ones Edit
        last is replacing).
        """
        messages = shown_messages(conversation, pending)
        messages = messages[: len(messages) - hide]
        forgotten = conversation.forgotten if conversation is not None else 0
        c = colours(palette)
        self.transcript.document().setDefaultStyleSheet(stylesheet(c))
        checked, refused = self._check(conversation, pending)

        def thumb(path: Path, shape: tuple[int, int], box: Box) -> str:
            # A saved copy is read from the file that was checked (its links resolved).
            return self.transcript.thumb_url(checked.get(path, path), shape, box)

        parts = []
        if conversation is not None and conversation.continues:
            parts.append(continued_html(c))
        if conversation is not None and conversation.summary:
            parts.append(summary_html(conversation.summary, c))
        for i, m in enumerate(messages):
            if i == forgotten and i > 0:
                parts.append(forgotten_html(c))
            parts.append(message_html(m, i, c, thumb, refused))
        if not messages and pending is None:
            parts.append(empty_html(loaded, c, named))
        if pending is not None:
            if streaming:
                head = f"<p style='color:{c.muted};font-size:small'>Model</p>"
                parts.append(bubble(f"{head}<p>{MARK}</p>", c, user=False))
            else:
                parts.append(message_html(Message("assistant", pending.answer), None, c, thumb))
        self.shown = messages
        self.transcript.setHtml("".join(parts))
        self._cursor = None
        if pending is not None and streaming:
            found = self.transcript.document().find(MARK)
            if not found.isNull():
                found.removeSelectedText()
                self._breaker = StreamBreaker()
                found.insertText(self._breaker.feed(pending.answer))  # keeps what came
                self._cursor = found
        self.scroll_to_end()

    def _check(
        self, conversation: Conversation | None, pending: Pending | None
    ) -> tuple[dict[Path, Path], dict[Path, str]]:
        """The conversation's attachments checked: the files to read, and why any is not.

        Only the header of each is read (`attachments.check_saved`), never a FIFO.
        """
        saved = [a for m in messages_of(conversation) for a in m.attachments]
        self._folders = self.copy_folders(conversation) if conversation is not None else []
        users = pending.user.attachments if pending is not None and pending.user else []
        self._fresh = {a.path for a in users} - {a.path for a in saved}
        checked: dict[Path, Path] = {}
        refused: dict[Path, str] = {}
        for a in saved:
            if a.path not in checked and a.path not in refused:
                try:
                    checked[a.path] = check_saved(a, self._folders)
                except SavedCopyError as e:
                    refused[a.path] = e.reason
        return checked, refused

    def stream(self, text: str) -> None:
        """Add an answer's next piece to its open bubble (long lines broken, bounded)."""
        if self._cursor is not None:
            shown = self._breaker.feed(text)
            if shown:
                self._cursor.insertText(shown)

    def scroll_to_end(self) -> None:
        """Show the end of the conversation."""
        bar = self.transcript.verticalScrollBar()
        bar.setValue(bar.maximum())

    def played_clip(self, link: str) -> Path | None:
        """The clip a Play link (`play:<message>:<attachment>`) names, if it may be played.

        Only a sound file, and of a saved conversation only a copy that passes its check
        now (`attachments.check_saved`): a saved conversation is a file anyone can edit,
        and the system opens whatever it is handed with the program its type names.
        """
        parts = link.split(":")
        try:
            clip = self.shown[int(parts[1])].attachments[int(parts[2])]
        except (IndexError, ValueError):
            return None
        return self._playable(clip)

    def _playable(self, clip: Attachment) -> Path | None:
        if clip.kind != AUDIO or kind_of(clip.path) != AUDIO:
            return None
        if clip.path in self._fresh:  # the user's own file, just picked
            return clip.path if clip.path.is_file() else None
        try:
            checked = check_saved(clip, self._folders)
        except SavedCopyError:
            return None
        return checked if kind_of(checked) == AUDIO else None  # a link named .wav to a .sh

    def copied_text(self, link: str) -> str | None:
        """What a Copy link (`copy:<message>` or `code:<message>:<block>`) copies."""
        parts = link.split(":")
        try:
            message = self.shown[int(parts[1])]
            return message.text if parts[0] == "copy" else code_blocks(message.text)[int(parts[2])]
        except (IndexError, ValueError):
            return None
