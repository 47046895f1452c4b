"""Small deterministic test inputs."""

from __future__ import annotations

import numpy as np
from PIL import Image


def make_image(width: int = 90, height: int = 60, seed: int = 0) -> Image.Image:
    """A noisy RGB image with a distinct colour in each channel."""
    rng = np.random.default_rng(seed)
    data = (rng.random((height, width, 3)) * 255).astype("uint8")
    data[: height // 2, : width // 2, 0] = 250  # a red block: channel order is visible
    return Image.fromarray(data)


def make_tone(
    seconds: float = 1.0, rate: int = 16000, freq: float = 440.0
) -> tuple[np.ndarray, int]:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype("float32"), rate
