"""Attachments: check an image or audio file and copy it into a form the runtime takes.

Every check happens before anything is sent to the model, so a bad file costs the user
nothing: the draft stays, the conversation is untouched, and the message says what to do.
Chat prepares each attachment here, and verify each of its inputs, the same way.

- Images are read as transformers' `load_image` reads them (EXIF orientation applied,
  RGB as PIL converts it), sized as transformers sizes them for the package's model where
  the package records how, and handed to the runtime as a lossless PNG (`pictures.py`
  says why, with what was measured).
- Audio is read as transformers' `load_audio` reads it (soundfile, channel mean, soxr
  resampling to the 16 kHz the runtime's audio processors expect), block by block, and
  written as 32-bit float WAV; headers that ask for absurd decoding are refused first
  (`mmforge.backend.audio`).
- Video files are refused by name (`VIDEO_SUFFIXES`): the runtime takes no video.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mmforge.backend import picture_sizing, pictures
from mmforge.backend.audio import MIN_SECONDS as MIN_AUDIO_SECONDS
from mmforge.backend.audio import SAMPLE_RATE as AUDIO_SAMPLE_RATE
from mmforge.backend.diskspace import no_space, out_of_space
from mmforge.backend.errors import MmforgeError
from mmforge.backend.json_fields import HINT, Fields

IMAGE = "image"
AUDIO = "audio"
VIDEO = "video"

VIDEO_SUFFIXES = frozenset({".mp4", ".webm", ".mkv", ".mov", ".avi"})
# Measured on onnxruntime-genai 0.18.0: its Python API has og.Images and og.Audios and no
# video type (the library exports OgaLoadImages/OgaLoadAudios only), and
# MultiModalProcessor.__call__ reads only the `images` and `audios` keywords: a `videos=`
# keyword is ignored, and a Qwen prompt holding <|vision_start|><|video_pad|> fails with
# "Prompt contained 1 vision_start tokens but received 0 images". No processor writes the
# video_grid_thw that the runtime's Qwen positions would need (source: src/models/
# qwen2_5_vl_image_processor.cpp and src/python/python.cpp, microsoft/onnxruntime-genai
# a0c04eb1). VideoChat-Flash takes a clip as its frames, each an image (see
# families/others.py), which mmforge does not convert.
NO_VIDEO = "ONNX Runtime GenAI 0.18 takes no video: its processor accepts only images and audio"

MAX_IMAGE_PIXELS = pictures.MAX_IMAGE_PIXELS
# The longest clip a saved conversation may say it holds (the intake takes 600 s).
MAX_SAVED_SECONDS = 86_400.0


class AttachmentError(MmforgeError):
    """An attachment that cannot be sent; the draft is kept."""


@dataclass(frozen=True)
class Attachment:
    """A checked attachment, ready for the runtime.

    Attributes:
        kind: "image" or "audio".
        path: The prepared file (a copy; the user's file is never changed).
        name: The file name the user picked, for display.
        note: What was done to the file, if anything (e.g. "resized from 10000×10000").
        width: Image width after preparation (images only).
        height: Image height after preparation (images only).
        seconds: Duration (audio only).
        shown_width: The picture's upright width as the user took it, where the copy was
            stretched to a fixed size for the model (InternVL's 448 × 448); 0: the copy's.
        shown_height: Likewise its height: the transcript draws the copy at this shape.
        shown_box: The part of the copy the transcript draws, (left, top, width, height),
            where the copy holds more than the picture (a split picture's canvas,
            Idefics2's: its whole part); all 0: the whole copy.
    """

    kind: str
    path: Path
    name: str
    note: str = ""
    width: int = 0
    height: int = 0
    seconds: float = 0.0
    shown_width: int = 0
    shown_height: int = 0
    shown_box: tuple[int, int, int, int] = (0, 0, 0, 0)

    @property
    def shown_shape(self) -> tuple[int, int]:
        """(shown_width, shown_height): the shape the transcript draws the picture at."""
        return self.shown_width, self.shown_height

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the path as a string)."""
        return {**asdict(self), "path": str(self.path)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attachment:
        """Inverse of `to_dict`.

        Raises:
            MmforgeError: A field is missing or of the wrong type (naming it).
        """
        return cls.from_fields(Fields(data, "an attachment"))

    @classmethod
    def from_fields(cls, f: Fields) -> Attachment:
        """An attachment from a JSON object read field by field (a saved conversation's).

        Raises:
            MmforgeError: A field is missing or of the wrong type (naming it).
        """
        path = f.text("path")
        if not path or "\0" in path:
            raise MmforgeError(f"{f.where}: {f.name('path')} is not a path", HINT)
        return cls(
            kind=f.choice("kind", (IMAGE, AUDIO)),
            path=Path(path),
            name=f.text("name", ""),
            note=f.text("note", ""),
            width=f.whole("width", 0, high=MAX_IMAGE_PIXELS),
            height=f.whole("height", 0, high=MAX_IMAGE_PIXELS),
            seconds=f.number("seconds", 0.0, high=MAX_SAVED_SECONDS),
            shown_width=f.whole("shown_width", 0, high=MAX_IMAGE_PIXELS),
            shown_height=f.whole("shown_height", 0, high=MAX_IMAGE_PIXELS),
            shown_box=_box(f.data.get("shown_box")),
        )


def _box(value: Any) -> tuple[int, int, int, int]:
    """A stored shown_box; a broken one is no box (the whole copy is drawn)."""
    if (
        isinstance(value, (list, tuple))
        and len(value) == 4
        and all(type(v) is int and 0 <= v <= 1 << 20 for v in value)
    ):
        return (value[0], value[1], value[2], value[3])
    return (0, 0, 0, 0)


def kind_of(path: Path) -> str:
    """Guess the attachment kind from the file name (the content is checked later)."""
    suffix = path.suffix.lower()
    if suffix in VIDEO_SUFFIXES:
        return VIDEO
    if suffix in {".wav", ".flac", ".ogg", ".mp3", ".aiff", ".aif", ".opus"}:
        return AUDIO
    return IMAGE


def refuse_video(path: Path) -> None:
    """Raise `AttachmentError` for a video file (by its name), before anything is loaded."""
    if path.suffix.lower() in VIDEO_SUFFIXES:
        raise AttachmentError(
            f"Cannot attach {path.name}: {NO_VIDEO}", "Attach still frames from it as images"
        )


def first_look(path: Path, kind: str) -> None:
    """The checks that need no decoding, for the moment a file is attached.

    A text file named .png, an empty or overlong clip, a picture too large to open are
    refused when they are added to a draft, not only at Send; `prepare` still checks
    everything. Reads only the file's header (a FIFO or a device is not opened).

    Raises:
        AttachmentError: The file cannot be this kind of attachment; the message says why.
    """
    import stat

    refuse_video(path)
    try:
        regular = stat.S_ISREG(path.stat().st_mode)
    except OSError:
        regular = False
    if not regular:
        raise AttachmentError(
            f"Cannot attach {path.name}: it is not a regular file", f"Check the path {path}"
        )
    _refuse_empty(path)
    if kind == IMAGE:
        try:
            pictures.header(path)
        except picture_sizing.PictureError as e:
            raise _picture_error(path, e) from None
    elif kind == AUDIO:
        info = _audio_info(path)
        if info.duration < MIN_AUDIO_SECONDS:
            raise _too_short(path, info.duration)


class SavedCopyError(AttachmentError):
    """A saved conversation's attachment copy that cannot be used; `reason` says why."""

    def __init__(self, path: Path, reason: str, hint: str | None):
        super().__init__(f"Cannot use {path.name}, saved in this conversation: {reason}", hint)
        self.reason = reason


# What a saved copy may hold beyond its samples at 8 bytes each (16-bit RGBA, float64):
# headers and metadata. The intake writes a PNG of the pixels or a 16 kHz mono WAV.
COPY_ROOM = 4 << 20
SAVED_HINT = (
    "The conversation's file or its copy was changed after it was saved: attach the "
    "file again in a new conversation"
)


def check_saved(attachment: Attachment, folders: Sequence[Path] | None) -> Path:
    """The intake's checks for a copy a saved conversation names, before it is read.

    A saved conversation is a file anyone can edit, and the runtime reads what it names
    whole, as it finds it: a FIFO blocked it, a text file named .png killed it (libjpeg
    calls exit()), a 1.5 GB sparse file was read whole. So the copy must lie inside the
    conversation's folder once links are resolved, pass `first_look` as a new attachment
    does (a regular file, not empty, a picture or clip within the intake's limits), be
    of the form the intake writes (a clip at 16 kHz, mono) and be no larger than its
    pixels or samples need. Nothing is opened but the header.

    Args:
        attachment: The saved attachment.
        folders: The folders its copy may be in (None: anywhere, for copies the running
            session made itself in a scratch folder).

    Returns:
        The copy's resolved path.

    Raises:
        SavedCopyError: The copy cannot be used; the message says why.
    """
    path = attachment.path
    real = Path(os.path.realpath(path))
    if folders is not None and not any(real.is_relative_to(os.path.realpath(f)) for f in folders):
        raise SavedCopyError(path, "it is outside this conversation's folder", SAVED_HINT)
    if attachment.kind not in (IMAGE, AUDIO):
        raise SavedCopyError(path, f"{attachment.kind!r} is not an attachment kind", SAVED_HINT)
    try:
        first_look(real, attachment.kind)  # what a new attachment's intake checks first
        _check_copy_size(real, attachment.kind)
    except picture_sizing.PictureError as e:
        raise SavedCopyError(path, str(e), SAVED_HINT) from None
    except SavedCopyError:
        raise
    except AttachmentError as e:
        reason = e.user_message.removeprefix(f"Cannot attach {real.name}: ")
        raise SavedCopyError(path, reason, SAVED_HINT) from None
    return real


def _check_copy_size(path: Path, kind: str) -> None:
    """Refuse a copy larger than its content needs, or not in the form the intake writes."""
    if kind == IMAGE:
        width, height, _ = pictures.header(path)
        samples = width * height
    else:
        info = _audio_info(path)
        if (info.channels, info.samplerate) != (1, AUDIO_SAMPLE_RATE):
            raise SavedCopyError(
                path,
                f"it is not a copy this app made ({info.channels} channels at "
                f"{info.samplerate} Hz; copies are mono at {AUDIO_SAMPLE_RATE} Hz)",
                SAVED_HINT,
            )
        samples = int(info.frames)
    size = path.stat().st_size
    if size > samples * 8 + COPY_ROOM:
        raise SavedCopyError(
            path,
            f"{size:,} bytes is more than its {samples:,} "
            f"{'pixels' if kind == IMAGE else 'samples'} need",
            SAVED_HINT,
        )


def _refuse_empty(path: Path) -> None:
    """An empty file is said to be empty, not to be of the wrong kind (a 0-byte .wav)."""
    try:
        empty = path.stat().st_size == 0
    except OSError:
        return  # the reading that follows says what is wrong
    if empty:
        raise AttachmentError(
            f"Cannot attach {path.name}: the file is empty (0 bytes)",
            "It holds nothing: pick the file again, or another one",
        )


def _audio_info(path: Path) -> Any:
    """The clip's header (soundfile's info), refused when it is no audio or asks too much.

    Too long, too many channels, an absurd rate or too many samples in all are refused
    here, before anything is decoded (`mmforge.backend.audio.check_header`).
    """
    import soundfile as sf

    from mmforge.backend import audio

    try:
        info = sf.info(str(path))
    except (RuntimeError, sf.LibsndfileError):
        raise _not_audio(path) from None
    try:
        audio.check_header(info)
    except audio.ClipRefused as e:
        raise AttachmentError(f"Cannot attach {path.name}: {e.reason}", e.hint) from None
    return info


def _picture_error(path: Path, error: picture_sizing.PictureError) -> AttachmentError:
    """The picture's fault in one line, with what to do."""
    return AttachmentError(f"Cannot attach {path.name}: {error}", error.hint)


def _not_audio(path: Path) -> AttachmentError:
    return AttachmentError(
        f"Cannot attach {path.name}: it is not an audio file this app can read",
        "Attach a WAV, FLAC or OGG file",
    )


def _too_short(path: Path, seconds: float) -> AttachmentError:
    if seconds <= 0:
        return AttachmentError(f"Cannot attach {path.name}: it holds no sound", "Pick another file")
    return AttachmentError(
        f"Cannot attach {path.name}: {seconds:.3f} s of audio is too short (the minimum is "
        f"{MIN_AUDIO_SECONDS} s)",
        "Attach a longer recording",
    )


def prepare(
    path: Path, kind: str, dest: Path, intake: picture_sizing.Intake | None = None
) -> Attachment:
    """Check one attachment and write the runtime-ready copy into the folder `dest`.

    The copy is private to the user (0600), as the user's pictures and recordings are.
    A video file is refused whatever kind it was given as. `intake` is how transformers
    reads pictures for the package's model (`package_intake`), None when the package
    records none: the picture then keeps its size and the runtime resizes it.
    """
    refuse_video(path)
    if not path.is_file():
        raise AttachmentError(f"Cannot attach {path.name}: no such file", f"Check the path {path}")
    if kind not in (IMAGE, AUDIO):
        raise AttachmentError(
            f"Unknown attachment kind {kind!r}", "Attach an image or an audio file"
        )
    _refuse_empty(path)
    dest.mkdir(parents=True, exist_ok=True, mode=0o700)
    before = set(dest.iterdir())
    try:
        attachment = (
            _prepare_image(path, dest, intake) if kind == IMAGE else _prepare_audio(path, dest)
        )
    except BaseException as e:
        for partial in set(dest.iterdir()) - before:  # a copy cut short: nothing half-written
            if partial.is_file():
                partial.unlink(missing_ok=True)
        if out_of_space(e):
            raise no_space(f"the copy of {path.name}", dest) from None
        raise
    attachment.path.chmod(0o600)
    return attachment


def _free_name(dest: Path, stem: str, suffix: str) -> Path:
    candidate = dest / f"{stem}{suffix}"
    n = 1
    while candidate.exists():
        n += 1
        candidate = dest / f"{stem}-{n}{suffix}"
    return candidate


def _prepare_image(path: Path, dest: Path, intake: picture_sizing.Intake | None) -> Attachment:
    try:
        taken = pictures.take(path, intake)
    except picture_sizing.PictureError as e:
        raise _picture_error(path, e) from None
    target = _free_name(dest, path.stem, ".png")
    pictures.save_lossless(taken.image, target)
    width, height = taken.image.size
    # A copy stretched to a fixed size is drawn at the picture's own shape again.
    stretched = intake is not None and intake.sizing is not None and intake.sizing.stretches
    shown = (taken.width, taken.height) if stretched and taken.resized else (0, 0)
    return Attachment(
        IMAGE,
        target,
        path.name,
        taken.note,
        width=width,
        height=height,
        shown_width=shown[0],
        shown_height=shown[1],
        shown_box=taken.shown_box,
    )


def package_intake(package: Path) -> picture_sizing.Intake | None:
    """How transformers reads pictures for a package's model, as its manifest records.

    None for a package converted before mmforge recorded it (or whose record is broken):
    its pictures then reach the runtime at their own size, and verify says what differs.
    """
    from mmforge.backend.library import read_manifest

    return picture_sizing.Intake.from_dict(read_manifest(package).get("pictures"))


def _prepare_audio(path: Path, dest: Path) -> Attachment:
    """Write the clip as transformers loads it (see `mmforge.backend.audio`)."""
    import soundfile as sf

    from mmforge.backend import audio

    info = _audio_info(path)
    target = _free_name(dest, path.stem, ".wav")
    as_runtime_reads = (info.format, info.subtype, info.channels, info.samplerate)
    if as_runtime_reads == ("WAV", "PCM_16", 1, AUDIO_SAMPLE_RATE):
        # 16 kHz mono 16-bit WAV: the runtime reads its samples as load_audio does
        # (measured, docs/chat-engine.md), so the user's file goes as it is.
        shutil.copyfile(path, target)
        return _audio_attachment(path, target, info.frames, "")
    try:
        done = audio.convert(path, target)
    except audio.ClipRefused as e:
        raise AttachmentError(f"Cannot attach {path.name}: {e.reason}", e.hint) from None
    except (RuntimeError, sf.LibsndfileError) as e:
        raise AttachmentError(
            f"Cannot attach {path.name}: the audio is damaged ({e})",
            "Export the audio again or pick another file",
        ) from None
    changes = []
    if done.channels > 1:
        changes.append(f"mixed {done.channels} channels to mono")
    if done.rate != AUDIO_SAMPLE_RATE:
        changes.append(f"resampled {done.rate} Hz to {AUDIO_SAMPLE_RATE} Hz")
    return _audio_attachment(path, target, done.samples, "; ".join(changes))


def _audio_attachment(path: Path, target: Path, samples: int, note: str) -> Attachment:
    """The prepared clip, refused when it is too short for the runtime."""
    if samples < MIN_AUDIO_SECONDS * AUDIO_SAMPLE_RATE:
        raise _too_short(path, samples / AUDIO_SAMPLE_RATE)
    seconds = round(samples / AUDIO_SAMPLE_RATE, 3)
    return Attachment(AUDIO, target, path.name, note, seconds=seconds)
