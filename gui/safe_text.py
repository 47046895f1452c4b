"""Showing what strangers wrote: as text, and never a file that the text names.

Configs, hub metadata, model answers, saved conversations and file names are written by
others. Qt's rich text loads what an `<img>` or a stylesheet link names: a QLabel or a
QTextBrowser given `<img src="/dev/zero">` reads that file until memory runs out, and a
FIFO blocks the window for good. So labels that show such text are plain text, text put
into rich contexts (tooltips, question boxes) is escaped, and every text browser refuses
to load anything (the chat transcript serves only the pictures it drew itself).
"""

from __future__ import annotations

import html
import os
import stat
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QLabel, QTextBrowser, QWidget

# A line longer than this is broken for display: Qt lays out a paragraph in time that
# grows with the square of its longest unbroken line (1 MB on one line froze the chat
# view for 87 s). The text itself is kept whole (conversation, Copy).
LONG_LINE = 500
# How far past LONG_LINE a word may run before it is broken where it stands.
WORD_SLACK = 60
LINE_BREAK = "\u2028"  # a line break within a paragraph (QTextDocument's line separator)
# The most characters of one text shown (a message, an error's details): a megabyte of
# text takes Qt a third of a second to lay out even in short lines, 12,000 about 15 ms.
MAX_SHOWN = 12_000
# The most characters, and lines, of a label, a tooltip or a question box.
SHORT = 300  # shaping 500 characters of mixed scripts took a message box 0.1 s
SHORT_LINES = 12


def refused() -> QImage:
    """What a resource loader returns to load nothing: an empty image, never None.

    Qt 6.11 reads the named file itself when a loader returns None (a null QVariant), and
    an empty QByteArray makes its image handler load the file by name; a null QImage ends
    the matter, for stylesheets too.
    """
    return QImage()


class SafeBrowser(QTextBrowser):
    """A text browser that loads no resource a document names (no image, no stylesheet)."""

    def loadResource(self, kind: int, url: QUrl | str) -> Any:
        """Nothing: see `refused`."""
        return refused()


def plain_label(text: str = "", parent: QWidget | None = None, *, wrap: bool = False) -> QLabel:
    """A label that shows its text as text, whatever it looks like."""
    label = QLabel(parent)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(wrap)
    label.setText(text)
    return label


def as_html(text: str) -> str:
    """Text for a place that takes rich text (a tooltip, a question box), shown as is."""
    shown = for_display(text, SHORT, SHORT_LINES)
    return "<p style='white-space:pre-wrap'>" + html.escape(shown) + "</p>"


def break_long_lines(text: str, limit: int = LONG_LINE) -> str:
    """`text` with every line longer than `limit` broken into lines of `limit` characters.

    For display only: a very long line costs Qt's layout time quadratic in its length.
    """
    if len(text) <= limit or all(len(line) <= limit for line in text.split("\n")):
        return text
    out: list[str] = []
    for line in text.split("\n"):
        while len(line) > limit:
            # At the last space that keeps the line within `limit` (a word stays whole),
            # or within `limit + WORD_SLACK` when a long word runs past it; else hard.
            cut = line.rfind(" ", 0, limit + 1)
            if cut <= 0:
                cut = line.find(" ", limit, limit + WORD_SLACK + 1)
            if cut <= 0:
                out.append(line[:limit])
                line = line[limit:]
            else:
                out.append(line[:cut])
                line = line[cut + 1 :]
        out.append(line)
    return "\n".join(out)


def for_display(text: str, limit: int = MAX_SHOWN, lines: int | None = None) -> str:
    """`text` cut to `limit` characters (and `lines` lines), long lines broken: for display.

    A message box sizes itself to its labels in several passes: 500 characters on 200
    short lines took it over 100 ms.
    """
    if len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit:,} more characters not shown)"
    text = break_long_lines(text, min(LONG_LINE, limit))
    if lines is not None and text.count("\n") >= lines:
        kept = text.split("\n")
        text = "\n".join(kept[:lines]) + f"\n… ({len(kept) - lines:,} more lines not shown)"
    return text


class StreamBreaker:
    """Streamed text as it is shown: long lines broken, nothing past `limit` characters.

    A token inserted into one unbroken line costs a layout of the whole line, so a long
    answer with no line break stalled the window more with every token. Lines break at a
    space (a word runs up to `WORD_SLACK` past the line to reach one) with a line
    separator, which stays within the paragraph: a new paragraph in mid-sentence, or in
    mid-word, was what the streamed text showed and the finished answer did not.
    """

    def __init__(self, limit: int = MAX_SHOWN, line: int = LONG_LINE):
        self.limit, self.line = limit, line
        self.column = self.total = 0

    def feed(self, text: str) -> str:
        """What to show of the next piece of text."""
        if self.total >= self.limit:
            return ""
        text = text[: self.limit - self.total]
        self.total += len(text)
        out: list[str] = []
        for i, part in enumerate(text.split("\n")):
            if i:
                out.append("\n")
                self.column = 0
            while self.column + len(part) > self.line:
                room = max(self.line - self.column, 0)
                cut = part.rfind(" ", 0, room + 1)
                if cut >= 0:  # a space within the line, or the one ending a long word
                    out += [part[:cut], LINE_BREAK]
                    part = part[cut + 1 :]
                elif self.column + len(part) <= self.line + WORD_SLACK:
                    break  # a word running past the line: its space breaks it
                else:
                    take = max(self.line + WORD_SLACK - self.column, 1)
                    out += [part[:take], LINE_BREAK]
                    part = part[take:]
                self.column = 0
            out.append(part)
            self.column += len(part)
        if self.total >= self.limit:
            out.append(" … (the rest is not shown)")
        return "".join(out)


def is_regular_file(path: Path) -> bool:
    """Whether `path` is a regular file (not a FIFO, a device or a folder) to read."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False
