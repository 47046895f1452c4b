"""The chat page's draft: the message input and the strip of attachments it carries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QSize, Qt, Signal, Slot
from PySide6.QtGui import QImage, QImageReader, QKeyEvent, QPixmap
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QToolButton, QWidget

from mmforge.backend.attachments import IMAGE
from mmforge.gui.safe_text import as_html, is_regular_file, plain_label


class ChatInput(QPlainTextEdit):
    """Enter sends, Shift+Enter breaks the line, Esc stops; files drop in, images paste."""

    send_requested = Signal()
    stop_requested = Signal()
    files_added = Signal(list)
    image_pasted = Signal(QImage)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAcceptDrops(True)
        self.setPlaceholderText("Message (Enter sends, Shift+Enter for a new line)")
        self.setTabChangesFocus(True)  # Tab moves on, as in the chat apps people know
        self.setMaximumHeight(110)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        """Enter / Shift+Enter / Esc."""
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.send_requested.emit()
            return
        if event.key() == Qt.Key.Key_Escape:
            self.stop_requested.emit()
            return
        super().keyPressEvent(event)

    def canInsertFromMimeData(self, source: Any) -> bool:
        """Accept files and images besides text."""
        return bool(source.hasUrls() or source.hasImage() or super().canInsertFromMimeData(source))

    def insertFromMimeData(self, source: Any) -> None:
        """Files become attachments; a pasted image too."""
        if source.hasUrls():
            self.files_added.emit([u.toLocalFile() for u in source.urls() if u.isLocalFile()])
        elif source.hasImage():
            self.image_pasted.emit(QImage(source.imageData()))
        else:
            super().insertFromMimeData(source)


class StatusLine(QLabel):
    """A one-line plain-text status that takes no room while it says nothing."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setVisible(False)

    def setText(self, text: str) -> None:
        """Show the text; hide the line when there is none."""
        super().setText(text)
        self.setVisible(bool(text))


class AttachmentStrip(QWidget):
    """The draft's attachments: image thumbnails and audio chips, each removable."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.files: list[tuple[Path, str]] = []
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.addStretch(1)

    def set_files(self, files: list[tuple[Path, str]]) -> None:
        """Replace the attachments."""
        self.files = list(files)
        self._redraw()

    def add(self, path: Path, kind: str) -> None:
        """Add one attachment."""
        self.files.append((path, kind))
        self._redraw()

    def _redraw(self) -> None:
        # Empty, it takes no room: the layout's spacing around it made an empty band.
        self.setVisible(bool(self.files))
        while self.row.count() > 1:
            item = self.row.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.deleteLater()
        for index, (path, kind) in enumerate(self.files):
            chip = QWidget()
            chip.setObjectName("attachmentChip")
            layout = QHBoxLayout(chip)
            layout.setContentsMargins(2, 2, 2, 2)
            label = plain_label()  # a file name is text, whatever it looks like
            if kind == IMAGE:
                pixmap = _chip_picture(path)
                if pixmap.isNull():
                    label.setText(path.name)
                else:
                    label.setPixmap(
                        pixmap.scaled(QSize(56, 56), Qt.AspectRatioMode.KeepAspectRatio)
                    )
            else:
                label.setText(f"♪ {path.name} ({_duration(path)})")
            label.setToolTip(as_html(str(path)))
            remove = QToolButton()
            remove.setText("✕")
            remove.setToolTip("Remove")
            remove.setAccessibleName(f"Remove {path.name}")
            remove.setProperty("index", index)
            remove.clicked.connect(self._remove)
            layout.addWidget(label)
            layout.addWidget(remove)
            self.row.insertWidget(self.row.count() - 1, chip)
        self.changed.emit()

    @Slot()
    def _remove(self) -> None:
        index = int(self.sender().property("index"))
        del self.files[index]
        self._redraw()


def _duration(path: Path) -> str:
    try:
        import soundfile

        return f"{soundfile.info(str(path)).duration:.1f} s"
    except Exception:  # noqa: BLE001 - unreadable audio is reported when sent
        return "?"


CHIP = 56  # the longest side of a draft's picture, in pixels


def _chip_picture(path: Path) -> QPixmap:
    """The picture of a draft's chip, upright and decoded at the chip's size.

    Turned as its EXIF orientation says, as transformers' load_image and the transcript
    show it; a null pixmap for anything but a readable picture file (a FIFO or a device
    would block the window).
    """
    if not is_regular_file(path):
        return QPixmap()
    reader = QImageReader(str(path))
    reader.setAutoTransform(True)
    size = reader.size()
    if size.isValid() and max(size.width(), size.height()) > CHIP:
        reader.setScaledSize(size.scaled(CHIP, CHIP, Qt.AspectRatioMode.KeepAspectRatio))
    image = reader.read()
    if image.isNull():
        return QPixmap()
    image = image.scaled(QSize(CHIP, CHIP), Qt.AspectRatioMode.KeepAspectRatio)
    return QPixmap.fromImage(image)
