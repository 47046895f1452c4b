"""Files shipped with the app: the probe image and audio clip, fonts, icons."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def probe_image() -> Path:
    """A 160×120 PNG with pure red, green and blue regions (a channel swap shows)."""
    return HERE / "probe.png"


def probe_audio() -> Path:
    """A 1.5 s, 16 kHz mono chirp."""
    return HERE / "probe.wav"


def known_models_file() -> Path:
    """The built-in list of known-good models (`backend/known_models.py` reads it)."""
    return HERE / "known_models.json"


def user_guide_file() -> Path:
    """The user guide shown by Help > User guide: README.md's user guide, copied."""
    return HERE / "user_guide.md"


def check_mark() -> Path:
    """A 13 px dark check mark, for ticked boxes on the dark palette's light fill."""
    return HERE / "check-dark.png"
