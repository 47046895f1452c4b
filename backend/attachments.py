"""Attachments: check an image or audio file and copy it into a form the runtime takes.

Every check happens before anything is sent to the model, so a bad file costs the user
nothing: the draft stays, the conversation is untouched, and the message says what to do.
Chat prepares each attachment here, and verify each of its inputs, the same way.

- Images are read as transformers' `load_image` reads them (EXIF orientation applied,
  RGB as PIL converts it), sized as transformers sizes them for the package's model where
  the package records how, and handed to the runtime as a lossless PNG (`pictures.py`
  says why, with what was measured).
- Audio is read with soundfile, mixed down to mono and resampled to 16 kHz (the rate the
  runtime's audio processors expect), then written as 16-bit PCM WAV.
- Video files are refused by name (`VIDEO_SUFFIXES`): the runtime takes no video.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mmforge.backend import pictures
from mmforge.backend.diskspace import no_space, out_of_space
from mmforge.backend.errors import MmforgeError

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
AUDIO_SAMPLE_RATE = 16_000
MAX_AUDIO_SECONDS = 600.0
# ORT GenAI 0.18's audio front ends divide by zero (SIGFPE, the process dies) on clips of
# 160 samples or fewer at 16 kHz; no speech is that short, so a margin costs nothing.
MIN_AUDIO_SECONDS = 0.1


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
    """

    kind: str
    path: Path
    name: str
    note: str = ""
    width: int = 0
    height: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the path as a string)."""
        return {**asdict(self), "path": str(self.path)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attachment:
        """Inverse of `to_dict`."""
        return cls(**{**data, "path": Path(data["path"])})


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
    if kind == IMAGE:
        try:
            pictures.header(path)
        except pictures.PictureError as e:
            raise _picture_error(path, e) from None
    elif kind == AUDIO:
        info = _audio_info(path)
        if info.duration < MIN_AUDIO_SECONDS:
            raise _too_short(path, info.duration)


def _audio_info(path: Path) -> Any:
    """The clip's header (soundfile's info), refused when it is no audio or too long."""
    import soundfile as sf

    try:
        info = sf.info(str(path))
    except (RuntimeError, sf.LibsndfileError):
        raise _not_audio(path) from None
    if info.duration > MAX_AUDIO_SECONDS:
        raise _too_long(path, info.duration)
    return info


def _picture_error(path: Path, error: pictures.PictureError) -> AttachmentError:
    """The picture's fault in one line, with what to do."""
    reason = str(error)
    if "too large" in reason:
        hint = f"Use an image under {MAX_IMAGE_PIXELS // 1_000_000} megapixels"
    elif "not an image" in reason:
        hint = "Attach a PNG, JPEG, WebP, BMP or GIF image"
    elif "elongated" in reason:
        hint = "Crop the image closer to a square"
    else:
        hint = "Save the image again or pick another file"
    return AttachmentError(f"Cannot attach {path.name}: {reason}", hint)


def _not_audio(path: Path) -> AttachmentError:
    return AttachmentError(
        f"Cannot attach {path.name}: it is not an audio file this app can read",
        "Attach a WAV, FLAC or OGG file",
    )


def _too_long(path: Path, seconds: float) -> AttachmentError:
    return AttachmentError(
        f"Cannot attach {path.name}: {seconds:.0f} s of audio is too long",
        f"Cut it to under {MAX_AUDIO_SECONDS / 60:.0f} minutes",
    )


def _too_short(path: Path, seconds: float) -> AttachmentError:
    if seconds <= 0:
        return AttachmentError(f"Cannot attach {path.name}: it holds no sound", "Pick another file")
    return AttachmentError(
        f"Cannot attach {path.name}: {seconds:.3f} s of audio is too short (the minimum is "
        f"{MIN_AUDIO_SECONDS} s)",
        "Attach a longer recording",
    )


def prepare(path: Path, kind: str, dest: Path, sizing: pictures.Sizing | None = None) -> Attachment:
    """Check one attachment and write the runtime-ready copy into the folder `dest`.

    The copy is private to the user (0600), as the user's pictures and recordings are.
    A video file is refused whatever kind it was given as. `sizing` is how transformers
    sizes pictures for the package's model (`package_sizing`), None when the package
    records none: the picture then keeps its size and the runtime resizes it.
    """
    refuse_video(path)
    if not path.is_file():
        raise AttachmentError(f"Cannot attach {path.name}: no such file", f"Check the path {path}")
    if kind not in (IMAGE, AUDIO):
        raise AttachmentError(
            f"Unknown attachment kind {kind!r}", "Attach an image or an audio file"
        )
    dest.mkdir(parents=True, exist_ok=True, mode=0o700)
    before = set(dest.iterdir())
    try:
        attachment = (
            _prepare_image(path, dest, sizing) if kind == IMAGE else _prepare_audio(path, dest)
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


def _prepare_image(path: Path, dest: Path, sizing: pictures.Sizing | None) -> Attachment:
    try:
        intake = pictures.take(path, sizing)
    except pictures.PictureError as e:
        raise _picture_error(path, e) from None
    target = _free_name(dest, path.stem, ".png")
    pictures.save_lossless(intake.image, target)
    width, height = intake.image.size
    return Attachment(IMAGE, target, path.name, intake.note, width=width, height=height)


def package_sizing(package: Path) -> pictures.Sizing | None:
    """How transformers sizes pictures for a package's model, as its manifest records.

    None for a package converted before mmforge recorded it (or whose record is broken):
    its pictures then reach the runtime at their own size, and verify says what differs.
    """
    from mmforge.backend.library import read_manifest

    return pictures.Sizing.from_dict(read_manifest(package).get("pictures"))


def _prepare_audio(path: Path, dest: Path) -> Attachment:
    import numpy as np
    import soundfile as sf

    info = _audio_info(path)
    try:
        samples, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (RuntimeError, sf.LibsndfileError) as e:
        raise AttachmentError(
            f"Cannot attach {path.name}: the audio is damaged ({e})",
            "Export the audio again or pick another file",
        ) from None
    if samples.shape[0] == 0:
        raise _too_short(path, 0.0)
    changes = []
    if samples.shape[1] > 1:
        changes.append(f"mixed {samples.shape[1]} channels to mono")
    mono = samples.mean(axis=1)
    if rate != AUDIO_SAMPLE_RATE:
        changes.append(f"resampled {rate} Hz to {AUDIO_SAMPLE_RATE} Hz")
        mono = resample(mono, rate, AUDIO_SAMPLE_RATE)
    if len(mono) < MIN_AUDIO_SECONDS * AUDIO_SAMPLE_RATE:
        raise _too_short(path, len(mono) / AUDIO_SAMPLE_RATE)
    target = _free_name(dest, path.stem, ".wav")
    if not changes and info.format == "WAV" and info.subtype == "PCM_16":
        shutil.copyfile(path, target)
    else:
        sf.write(str(target), np.clip(mono, -1.0, 1.0), AUDIO_SAMPLE_RATE, subtype="PCM_16")
    seconds = len(mono) / AUDIO_SAMPLE_RATE
    return Attachment(AUDIO, target, path.name, "; ".join(changes), seconds=round(seconds, 3))


def resample(signal: Any, rate: int, target_rate: int) -> Any:
    """Band-limited polyphase resampling of a mono float signal, in bounded memory.

    The ratio is reduced to up/down; a Kaiser-windowed sinc low-pass at the lower of the
    two Nyquist frequencies (10 zero crossings a side, as scipy's resample_poly) keeps
    downsampling from aliasing. Each output sample is the dot product of one filter phase
    with the input around it; the ends are padded with silence, so nothing wraps around
    from one end of the clip to the other. Outputs are made in blocks, so the working
    memory stays a few MB whatever the clip's length.
    """
    import math

    import numpy as np

    x = np.asarray(signal, dtype=np.float32)
    g = math.gcd(int(rate), int(target_rate))
    up, down = int(target_rate) // g, int(rate) // g
    if up == down:
        return x.copy()
    taps, delay = _lowpass(up, down)  # length up * per_phase, centred at `delay`
    per_phase = len(taps) // up
    # phases[p, k] = taps[p + k * up], so y[n] = sum_k phases[p, k] * x[i - k] with
    # p = (n * down + delay) % up and i = (n * down + delay) // up.
    phases = taps.reshape(per_phase, up).T[:, :, None].astype(np.float32)
    n_out = max(1, math.ceil(len(x) * up / down))
    out = np.empty(n_out, np.float32)
    block = 1 << 14
    k = np.arange(per_phase)[:, None]
    for start in range(0, n_out, block):
        n = np.arange(start, min(start + block, n_out), dtype=np.int64)
        pos = n * down + delay
        phase, base = pos % up, pos // up
        index = base[None, :] - k  # [per_phase, block] input positions
        inside = (index >= 0) & (index < len(x))  # beyond the ends: silence
        window = np.where(inside, x[np.clip(index, 0, len(x) - 1)], np.float32(0))
        out[start : start + len(n)] = np.einsum("kb,kb->b", phases[phase, :, 0].T, window)
    return out


def _lowpass(up: int, down: int) -> tuple[Any, int]:
    """The polyphase filter and the index of its centre.

    A Kaiser-windowed sinc at 1/max(up, down) of the upsampled rate, with gain `up`.
    """
    import numpy as np

    most = max(up, down)
    half = 10 * most
    n = np.arange(-half, half + 1, dtype=np.float64)
    taps = np.sinc(n / most) / most * np.kaiser(2 * half + 1, 5.0) * up
    pad = (-len(taps)) % up  # a whole number of taps per phase
    return np.concatenate([taps, np.zeros(pad)]), half
