"""Packages converted with and without one of `convert.graphs`' precision steps.

For the benchmarks that measure what a step changes (`f16_islands.py`, `f16_state.py`):
the same checkpoint, converted once with the step and once with it made a no-op; a
folder that already holds a package is reused.
"""

from __future__ import annotations

from pathlib import Path


def converted(checkpoint: Path, out: Path, dtype: str, without: str | None = None) -> Path:
    """`checkpoint` converted to `dtype` in `out`, with `graphs.<without>` skipped if named."""
    import mmforge.backend.convert.graphs as graphs
    from mmforge.backend.convert import convert

    if (out / "genai_config.json").is_file():
        return out
    real = getattr(graphs, without) if without else None
    try:
        if without:
            setattr(graphs, without, lambda model: 0)
        convert(str(checkpoint), out, dtype=dtype)
    finally:
        if without:
            setattr(graphs, without, real)
    return out
