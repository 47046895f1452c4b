"""Drawing the chat page's conversation into its transcript, and streaming an answer in."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QPalette, QTextCursor

from mmforge.backend.chat.conversations import Conversation, Message
from mmforge.gui.chat_turns import Pending, shown_messages
from mmforge.gui.markdown import code_blocks
from mmforge.gui.safe_text import StreamBreaker
from mmforge.gui.theme import colours, stylesheet
from mmforge.gui.transcript import (
    MARK,
    Transcript,
    bubble,
    continued_html,
    empty_html,
    forgotten_html,
    message_html,
    summary_html,
)


class TranscriptWriter:
    """What the transcript shows: a whole redraw, or the streamed answer's next piece.

    Streaming costs one text insertion per token, inside the open answer's bubble; the
    Markdown render of the whole answer happens once, when it ends (re-rendering per token
    stalled the window).
    """

    def __init__(self, transcript: Transcript):
        self.transcript = transcript
        self.shown: list[Message] = []  # the messages drawn, as their Copy links count them
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
        thumb = self.transcript.thumb_url
        parts = []
        if conversation is not None and conversation.continues:
            parts.append(continued_html(c))
        if conversation is not None and conversation.summary:
            parts.append(summary_html(conversation.summary, c))
        for i, m in enumerate(messages):
            if i == forgotten and i > 0:
                parts.append(forgotten_html(c))
            parts.append(message_html(m, i, c, thumb))
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
        """The clip a Play link (`play:<message>:<attachment>`) names, if it is there.

        Only a sound file: a saved conversation is a file anyone can edit, and the system
        opens whatever it is handed with the program its type names.
        """
        from mmforge.backend.attachments import AUDIO, kind_of

        parts = link.split(":")
        try:
            clip = self.shown[int(parts[1])].attachments[int(parts[2])].path
        except (IndexError, ValueError):
            return None
        return clip if clip.is_file() and kind_of(clip) == AUDIO else None

    def copied_text(self, link: str) -> str | None:
        """What a Copy link (`copy:<message>` or `code:<message>:<block>`) copies."""
        parts = link.split(":")
        try:
            message = self.shown[int(parts[1])]
            return message.text if parts[0] == "copy" else code_blocks(message.text)[int(parts[2])]
        except (IndexError, ValueError):
            return None
