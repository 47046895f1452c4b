"""What the chat page checks when a file is attached: the kind, the model, a pasted image."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from PySide6.QtGui import QImage
from PySide6.QtWidgets import QFileDialog, QWidget

from mmforge.backend.attachments import AUDIO, IMAGE, NO_VIDEO, VIDEO, AttachmentError, first_look
from mmforge.backend.library import model_name
from mmforge.gui.errors import show_error

PICTURE_PATTERNS = "*.png *.jpg *.jpeg *.webp *.bmp *.gif *.tif *.tiff"
FILE_TYPES = f"Images and audio ({PICTURE_PATTERNS} *.wav *.flac *.ogg *.mp3 *.opus *.aiff)"
PICTURE_TYPES = f"Images ({PICTURE_PATTERNS})"


def pick_files(parent: QWidget, start: str = "", *, sound: bool = True) -> list[str]:
    """The files the user picks in Attach…'s dialog (none when cancelled).

    It opens in `start` (the folder last attached from), else the home folder: Qt's own
    start, the folder the app was launched from, showed a source tree. `sound`: the
    loaded model hears, so audio files are offered too.
    """
    where = start if start and Path(start).is_dir() else str(Path.home())
    types = FILE_TYPES if sound else PICTURE_TYPES
    files, _ = QFileDialog.getOpenFileNames(parent, "Attach", where, types)
    return list(files)


class TakesAttachments(Protocol):
    """What a loaded session or a package says it takes (SessionInfo, PackageInfo)."""

    @property
    def pipeline_type(self) -> str:
        """The ONNX Runtime GenAI model type."""
        ...

    @property
    def vision(self) -> bool:
        """Whether it takes images."""
        ...

    @property
    def audio(self) -> bool:
        """Whether it takes audio."""
        ...


def refusal(info: TakesAttachments | None, kind: str) -> str | None:
    """Why the loaded package cannot take this kind of attachment (None: it can)."""
    if kind == VIDEO:
        return NO_VIDEO  # whatever the model: the runtime has no video input
    if info is None:
        return None  # nothing loaded yet: checked when the message is sent
    takes = {IMAGE: info.vision, AUDIO: info.audio}.get(kind, False)
    if takes:
        return None
    what = "images" if kind == IMAGE else "audio" if kind == AUDIO else "this kind of file"
    folder = getattr(info, "package", None) or getattr(info, "folder", None) or ""
    # The package, not the model: Gemma 3n hears, but its package takes pictures and text.
    return f"this package ({model_name(folder, info.pipeline_type)}) does not take {what}"


def attachment_problem(parent: QWidget, path: Path, kind: str) -> bool:
    """Whether the file cannot be attached; if so the user is told why, at once.

    Only what needs no decoding (`attachments.first_look`): a text file named .png, an
    empty clip. Send checks the rest.
    """
    try:
        first_look(path, kind)
    except AttachmentError as e:
        show_error(parent, {"message": e.user_message, "hint": e.hint})
        return True
    return False


def refusal_hint(kind: str) -> str:
    """What to do instead of attaching a refused file."""
    if kind == VIDEO:
        return "Attach still frames from it as images"
    if kind == AUDIO:
        return "Load a package that takes sound: a Gemma 4 or Phi-4-multimodal one"
    return "Load a package that takes pictures"


def save_pasted(image: QImage, path: Path) -> bool:
    """Write a pasted image to `path` as PNG; False when it cannot be."""
    # PySide6 6.11 takes the format as a str (bytes raise ValueError; its stubs say bytes).
    return not image.isNull() and bool(image.save(str(path), "PNG"))  # type: ignore[call-overload]
