"""Small deterministic test inputs (images come from mmforge.resources.probe_image)."""

from __future__ import annotations

import numpy as np


def make_tone(
    seconds: float = 1.0, rate: int = 16000, freq: float = 440.0
) -> tuple[np.ndarray, int]:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype("float32"), rate
