"""Tiny random-weight checkpoints of every runtime family, built offline.

Used as test fixtures and as the built-in demo model. Each checkpoint loads in
transformers, has an offline-trained tokenizer whose special tokens sit at the ids its
config names, a chat template and the family's preprocessor config.
"""

from __future__ import annotations

from pathlib import Path

from mmforge.backend.tiny.build import TinyCheckpoint, write_tiny
from mmforge.backend.tiny.specs import SPECS

__all__ = ["FAMILIES", "TinyCheckpoint", "build_tiny"]

FAMILIES: tuple[str, ...] = tuple(SPECS)


def build_tiny(family_key: str, folder: Path, *, seed: int = 0) -> TinyCheckpoint:
    """Write the tiny checkpoint of a runtime family into `folder`.

    Raises:
        KeyError: The family has no tiny spec.
    """
    return write_tiny(SPECS[family_key], folder, seed=seed)
