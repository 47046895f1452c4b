"""Tiny random-weight checkpoints of every runtime family, built offline.

Used as test fixtures and as the built-in demo model. Each checkpoint loads in
transformers, has an offline-trained tokenizer whose special tokens sit at the ids its
config names, a chat template and the family's preprocessor config. The specs live in
each family's folder (`families/<family>/tiny.py`); `build.py` writes any of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmforge.backend.tiny.build import TinyCheckpoint, TinySpec, write_tiny

__all__ = ["FAMILIES", "TinyCheckpoint", "build_tiny", "specs"]


def specs() -> dict[str, TinySpec]:
    """Every family's tiny spec, by family key."""
    from mmforge.backend.families import ALL  # the families' specs import this package

    return {f.key: f.fixtures.tiny for f in ALL if f.fixtures.tiny is not None}


def __getattr__(name: str) -> Any:
    if name == "FAMILIES":  # the families with a tiny checkpoint, in registry order
        return tuple(specs())
    raise AttributeError(name)


def build_tiny(family_key: str, folder: Path, *, seed: int | None = None) -> TinyCheckpoint:
    """Write the tiny checkpoint of a runtime family into `folder` (`seed`: its spec's).

    Raises:
        KeyError: The family has no tiny spec.
    """
    spec = specs()[family_key]
    return write_tiny(spec, folder, seed=spec.seed if seed is None else seed)
