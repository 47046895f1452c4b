"""One column of the Compare page: a package's answer, streamed, with its speed.

The answer is plain text in a read-only editor (a model's text is never rich text), and
the token where it parts from the other answer is marked with an extra selection, which
changes no character of it.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QTimer, Slot
from PySide6.QtGui import QColor, QFont, QPalette, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QFrame, QLabel, QPlainTextEdit, QTextEdit, QVBoxLayout, QWidget

from mmforge.backend.chat.values import SessionInfo, TurnResult
from mmforge.backend.library import model_name
from mmforge.gui.safe_text import for_display, plain_label
from mmforge.gui.theme import colours

# How often the streamed text and the live figures are redrawn: one redraw per token
# costs a layout per token, and a small model streams thousands a second.
REDRAW_MS = 60


def speed_text(turn: TurnResult) -> str:
    """A finished answer's figures: tokens, decode speed, time to first token."""
    s = turn.stats
    stopped = " (stopped)" if turn.stop_reason == "stopped" else ""
    return (
        f"{s.new_tokens} tokens{stopped} · {s.decode_tokens_per_s:.1f} tokens/s · "
        f"first token after {s.time_to_first_token_s:.2f} s"
    )


class AnswerColumn(QFrame):
    """A package's name, its answer as it streams, and the answer's speed."""

    def __init__(self, letter: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.letter = letter
        self.setObjectName(f"compareColumn{letter}")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.title = plain_label()
        bold = QFont(self.title.font())
        bold.setBold(True)
        self.title.setFont(bold)
        self.loaded = plain_label(wrap=True)
        self.speed = plain_label(wrap=True)
        self.speed.setObjectName(f"compareSpeed{letter}")
        self.answer = QPlainTextEdit()
        self.answer.setObjectName(f"compareAnswer{letter}")
        self.answer.setReadOnly(True)
        self.answer.setAccessibleName(f"Answer {letter}")
        self.answer.setMinimumHeight(80)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.title)
        layout.addWidget(self.loaded)
        layout.addWidget(self.answer, 1)
        layout.addWidget(self.speed)
        # What the answer streamed, one piece per token: places a token in the text.
        self.pieces: list[str] = []
        self.turn: TurnResult | None = None
        self.marked: tuple[int, int] | None = None
        self._unshown = ""
        self._redraw = QTimer(self, singleShot=True, interval=REDRAW_MS)
        self._redraw.timeout.connect(self._flush)
        self.set_package(None, "")

    def set_package(self, folder: Path | None, dtype: str) -> None:
        """Name the package this column answers with."""
        name = f"{folder.name} ({dtype})" if folder is not None else "no package chosen"
        self.title.setText(for_display(f"{self.letter}: {name}", 200))
        self.loaded.setText("")

    def set_loaded(self, info: SessionInfo) -> None:
        """Say what loading the package took."""
        self.loaded.setText(
            f"{model_name(info.package, info.pipeline_type)} on {info.ep.upper()}, "
            f"loaded in {info.load_s:.1f} s, {info.load_memory_bytes / 1e6:.0f} MB"
        )

    def clear(self, status: str = "") -> None:
        """Empty, for a new prompt; `status` says what it waits for."""
        self._redraw.stop()
        self.pieces, self.turn, self.marked, self._unshown = [], None, None, ""
        self.answer.setExtraSelections([])
        self.answer.clear()
        self.speed.setText(status)

    def add(self, piece: str) -> None:
        """One more token's text (drawn with the others every REDRAW_MS)."""
        self.pieces.append(piece)
        self._unshown += piece
        if not self._redraw.isActive():
            self._redraw.start()

    @Slot()
    def _flush(self) -> None:
        if self._unshown:
            cursor = QTextCursor(self.answer.document())
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertText(self._unshown)
            self._unshown = ""
            self.answer.verticalScrollBar().setValue(self.answer.verticalScrollBar().maximum())
        if self.turn is None and self.pieces:
            self.speed.setText(f"Generating… {len(self.pieces)} tokens")

    def finish(self, turn: TurnResult) -> None:
        """The answer ended: its figures, and its whole text as streamed."""
        self.turn = turn
        self._flush()
        self.speed.setText(speed_text(turn))

    def say(self, status: str) -> None:
        """A line under the answer (waiting, loading, failed)."""
        self.speed.setText(status)

    def text(self) -> str:
        """The answer as shown."""
        return self.answer.toPlainText()

    def mark(self, span: tuple[int, int]) -> None:
        """Mark where the answer parts from the other: characters [start, end) of it.

        An empty span (the answer ended where the other goes on) marks nothing in the
        text; a span of spaces or line breaks reaches to the next visible character.
        """
        self._flush()
        self.marked = span
        self._draw_mark()
        cursor = QTextCursor(self.answer.document())
        cursor.setPosition(min(span[0], len(self.text())))
        self.answer.setTextCursor(cursor)
        self.answer.ensureCursorVisible()

    def _draw_mark(self) -> None:
        """The parting token in the accent colour, what follows it tinted."""
        self.answer.setExtraSelections([])
        if self.marked is None:
            return
        text = self.text()
        start, end = (min(i, len(text)) for i in self.marked)
        while end < len(text) and not text[start:end].strip():
            end += 1
        if start == end:
            return
        c = colours(self.palette())
        token = QTextCharFormat()
        token.setBackground(QColor(c.warn))
        token.setForeground(self.palette().color(QPalette.ColorRole.Base))
        token.setFontWeight(QFont.Weight.Bold)
        rest = QTextCharFormat()
        rest.setBackground(QColor(c.note))
        selections = [self._selection(start, end, token)]
        if end < len(text):
            selections.append(self._selection(end, len(text), rest))
        self.answer.setExtraSelections(selections)

    def _selection(self, start: int, end: int, form: QTextCharFormat) -> QTextEdit.ExtraSelection:
        selection = QTextEdit.ExtraSelection()
        cursor = QTextCursor(self.answer.document())
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        selection.cursor = cursor
        selection.format = form
        return selection

    def changeEvent(self, event: QEvent) -> None:
        """Redraw the mark in the new palette's colours."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "marked"):
            self._draw_mark()


def heading(text: str) -> QLabel:
    """A bold plain-text line (the verdict over the columns)."""
    label = plain_label(text, wrap=True)
    font = QFont(label.font())
    font.setBold(True)
    label.setFont(font)
    return label
