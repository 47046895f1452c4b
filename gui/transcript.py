"""The chat transcript: messages drawn as bubbles, pictures from scaled copies, drops."""

from __future__ import annotations

import html
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from PySide6.QtCore import QPoint, QRect, QSize, Qt, QUrl, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage, QImageReader, QTextDocument
from PySide6.QtWidgets import QWidget

from mmforge.backend.attachments import IMAGE, Attachment
from mmforge.backend.chat.conversations import Message
from mmforge.gui.markdown import plain, to_html
from mmforge.gui.safe_text import SafeBrowser, for_display, is_regular_file, refused
from mmforge.gui.theme import Colours

# (left, top, width, height) of a file's part that is the picture (Attachment.shown_box).
Box = tuple[int, int, int, int]

STOPS = {"eos": "end of answer", "length": "token limit", "stopped": "stopped"}
THUMB = 200  # the longest side of an image in the transcript, in pixels
NAME_SHOWN = 80  # the most characters of an attachment's name drawn
MARK = "\u2063"  # an invisible separator: where streamed tokens go in the open answer
FORGOTTEN = "Earlier turns are no longer in the model's view (the conversation outgrew its context)"
CONTINUED = "This conversation goes on from an earlier one that outgrew the model's context."
SUMMARY = "Summary of the earlier conversation, written by the model (the model reads it first)"


class Transcript(SafeBrowser):
    """The conversation as a document; pictures are drawn from scaled copies.

    The view registers each picture it draws (`thumb_url`) and writes it as
    `<img src="thumb:<secret>-N">`: the browser asks `loadResource` for it, which scales the file
    once and keeps the result, so a redraw never decodes a full-size photo again. Any
    other resource (an image or a `thumb:` URL an answer or a saved conversation names)
    is refused and never read.

    Files dropped on it are offered as attachments (`files_dropped`), as its empty text
    says; the document itself never takes a drop.

    Signals:
        files_dropped(list[str]): local files dropped on the transcript.
    """

    files_dropped = Signal(list)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._thumbs: dict[str, QImage] = {}
        self._urls: dict[tuple[Path, tuple[int, int], Box], str] = {}
        self._paths: dict[str, tuple[Path, tuple[int, int], Box]] = {}
        # Not guessable: an answer that writes `thumb:...` draws none of these pictures.
        self._secret = secrets.token_hex(8)
        self.setOpenLinks(False)
        self.setAcceptDrops(True)
        self.viewport().setAcceptDrops(True)

    def thumb_url(
        self, path: Path, shape: tuple[int, int] = (0, 0), box: Box = (0, 0, 0, 0)
    ) -> str:
        """The URL the transcript draws the picture `path` by (it may load that file).

        `shape`: the (width, height) to draw it at the proportions of, where the file was
        stretched for the model (Attachment.shown_width); (0, 0): the file's own. `box`:
        the part of the file that is the picture (Attachment.shown_box); all 0: all of it.
        """
        key = (path, shape, box)
        url = self._urls.get(key)
        if url is None:
            url = self._urls[key] = f"thumb:{self._secret}-{len(self._urls)}"
            self._paths[url] = key
        return url

    def loadResource(self, kind: int, url: QUrl | str) -> Any:
        """The registered thumbnails; nothing else (see `safe_text.refused`)."""
        key = QUrl(url).toString()
        registered = self._paths.get(key)
        if kind != QTextDocument.ResourceType.ImageResource.value or registered is None:
            return refused()
        if key not in self._thumbs:
            self._thumbs[key] = _thumbnail(*registered)
        return self._thumbs[key]

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        """Files may be dropped here (they become attachments of the draft)."""
        if event.mimeData().hasUrls():
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event: Any) -> None:
        """As `dragEnterEvent`."""
        if event.mimeData().hasUrls():
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        """Hand the local files on; nothing is inserted into the document."""
        urls = event.mimeData().urls() if event.mimeData().hasUrls() else []
        files = [u.toLocalFile() for u in urls if u.isLocalFile()]
        if files:
            event.acceptProposedAction()
            self.files_dropped.emit(files)
        else:
            event.ignore()


def _thumbnail(path: Path, shape: tuple[int, int] = (0, 0), box: Box = (0, 0, 0, 0)) -> QImage:
    """The picture scaled to fit THUMB, at `shape`'s proportions where it is given.

    Only `box` of the file where it is given (a split picture's canvas holds the picture
    and its parts). Turned as its EXIF orientation says, as transformers' load_image
    turns it: while an answer streams, the message holds the user's own files (a phone's
    photo stored sideways), and chat's copies are upright already. An empty image for
    anything but a readable file.
    """
    if not is_regular_file(path):  # a FIFO or a device named in a saved conversation
        return QImage()
    reader = QImageReader(str(path))
    reader.setAutoTransform(True)
    size = reader.size()
    if box[2] > 0 and box[3] > 0 and size.isValid():
        clip = QRect(*box).intersected(QRect(QPoint(0, 0), size))
        if not clip.isEmpty():
            reader.setClipRect(clip)
            size = clip.size()
    if min(shape) > 0 and size.isValid():  # stretched back to the picture as taken
        fit = QSize(*shape).scaled(THUMB, THUMB, Qt.AspectRatioMode.KeepAspectRatio)
        reader.setScaledSize(fit if max(shape) > THUMB else QSize(*shape))
    elif size.isValid() and max(size.width(), size.height()) > THUMB:
        reader.setScaledSize(size.scaled(THUMB, THUMB, Qt.AspectRatioMode.KeepAspectRatio))
    image = reader.read()
    return image if not image.isNull() else QImage()


def empty_html(loaded: bool, c: Colours, named: str = "") -> str:
    """What an empty transcript says: the next step (`named`: the package field's)."""
    if loaded:
        text = (
            "Ask something below and press Enter. To show the model a picture, use "
            "Attach…, drag it here, or paste it with Ctrl+V."
        )
    elif named:
        text = (
            f"Press Load to chat with {named}, or pick another package from the Library "
            "list above. Saved conversations on the left open without a model."
        )
    else:
        text = (
            "Choose a package to chat with: pick one from the Library list above, or "
            "Choose… a folder, then press Load. Convert a model first if you have none. "
            "Saved conversations on the left open without a model."
        )
    return f"<p style='color:{c.muted}'>{html.escape(text)}</p>"


def forgotten_html(c: Colours) -> str:
    """The marker drawn where the model's view of the conversation begins."""
    return (
        f"<p align='center' style='color:{c.muted};font-size:small'>"
        f"— {html.escape(FORGOTTEN)} —</p>"
    )


def continued_html(c: Colours) -> str:
    """The note atop a conversation that goes on from one that outgrew the context.

    Its link (`continues:`) opens the earlier conversation.
    """
    return (
        f"<p align='center' style='color:{c.muted};font-size:small'>"
        f"— {html.escape(CONTINUED)} <a href='continues:'>Open the earlier one</a> —</p>"
    )


def summary_html(summary: str, c: Colours) -> str:
    """The model's summary of the earlier conversation, drawn first and marked as one."""
    muted = f"color:{c.muted};font-size:small"
    head = f"<p style='{muted}'>{html.escape(SUMMARY)}</p>"
    return bubble(head + plain(for_display(summary)), c, user=False)


def bubble(body: str, c: Colours, *, user: bool) -> str:
    """A message drawn as a bubble: the user's on the right, the model's on the left."""
    colour = c.user_bubble if user else c.model_bubble
    cell = f"<td bgcolor='{colour}'>{body}</td>"
    gap = "<td width='15%'></td>"
    row = gap + cell if user else cell + gap
    return (
        "<table width='100%' cellspacing='0' cellpadding='10' style='margin-bottom:10px'>"
        f"<tr>{row}</tr></table>"
    )


def message_html(
    m: Message,
    index: int | None,
    c: Colours,
    thumb: Callable[[Path, tuple[int, int], Box], str] | None = None,
    refused: Mapping[Path, str] | None = None,
) -> str:
    """One message of the transcript; `index` names it in its Copy links (None: none).

    `thumb` gives the URL a picture attachment is drawn by (None: pictures are not drawn).
    `refused`: why an attachment's file may not be read, by its path (a saved copy that
    failed `attachments.check_saved`): it is named with why, instead of drawn or given a
    Play link.
    Text is cut and its long lines broken for display (`safe_text.for_display`); the
    message itself, and what Copy copies, stay whole.
    """
    muted = f"color:{c.muted};font-size:small"
    copy = f" · <a href='copy:{index}'>Copy</a>" if index is not None and m.text.strip() else ""
    if m.role == "user":
        refused = refused or {}
        pictures = "".join(
            f"<img src='{html.escape(thumb(a.path, a.shown_shape, a.shown_box))}'> "
            for a in m.attachments
            if a.kind == IMAGE and thumb is not None and a.path not in refused
        )
        unshown = "".join(
            _refused_html(a, refused[a.path], c) for a in m.attachments if a.path in refused
        )
        # A sound clip plays from its chip (`play:<message>:<attachment>`).
        chips = "".join(
            f"<span style='background:{c.chip}'>&nbsp;♪ {html.escape(_short(a.name))}&nbsp;</span>"
            + (f" <a href='play:{index}:{k}'>Play</a>" if index is not None else "")
            + " "
            for k, a in enumerate(m.attachments)
            if a.kind != IMAGE and a.path not in refused
        )
        head = f"<p style='{muted}'>You{copy}</p>"
        shown = f"<p>{pictures}</p>" if pictures else ""
        shown += unshown
        shown += f"<p>{chips}</p>" if chips else ""
        return bubble(head + shown + plain(for_display(m.text)), c, user=True)
    links = None if index is None else (lambda k: f"code:{index}:{k}")
    body = (
        to_html(for_display(m.text), style=c.pygments, border=c.border, code_link=links)
        if m.text
        else "<p><i>(no text)</i></p>"
    )
    stats = m.stats
    line = ""
    if stats:
        # How the answer ended, in words; an answer saved before that was recorded says
        # nothing rather than the engine's internal word for how it read the prompt.
        ended = STOPS.get(m.stop_reason)
        line = (
            f"{stats.get('new_tokens')} tokens · first after "
            f"{stats.get('time_to_first_token_s', 0):.2f} s · "
            f"{stats.get('decode_tokens_per_s', 0):.1f} tokens/s" + (f" · {ended}" if ended else "")
        )
    head = f"<p style='{muted}'>Model{copy}</p>"
    foot = f"<p style='{muted}'>{line}</p>" if line else ""
    return bubble(head + body + foot, c, user=False)


def _short(name: str) -> str:
    """An attachment's name as drawn: a saved conversation's may be of any length."""
    return name if len(name) <= NAME_SHOWN else name[: NAME_SHOWN - 1] + "…"


def _refused_html(a: Attachment, reason: str, c: Colours) -> str:
    """A line naming an attachment whose file is not read, with why (also its tooltip)."""
    what = "Picture" if a.kind == IMAGE else "Clip"
    done = "not shown" if a.kind == IMAGE else "cannot play"
    return (
        f"<p style='color:{c.muted};font-size:small' title='{html.escape(reason)}'>"
        f"{what} {html.escape(_short(a.name))} {done}: {html.escape(reason)}</p>"
    )
