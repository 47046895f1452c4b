"""How much memory a package takes once a chat worker has loaded it, from its files.

The estimate inspect makes from a checkpoint (`Sizes.memory_bytes`), made from a package:
its ONNX files as ONNX Runtime holds them on the CPU (f16 components twice: the CPU
kernels run them as float32), a KV cache of `inspect.KV_CONTEXT` tokens on every layer,
and the worker process itself (the runtime holds one copy of the package: `runtime`).
The Compare page weighs two packages with it against the memory this machine has
available. It errs high: against the peak resident memory of a
session that loaded a 200M Qwen2.5-VL-shaped package and answered 16 tokens, it said
1.10× (f16), 1.33× (f32) and 1.74× (int4, where the worker's own share dominates).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.inspect import CPU_LOAD_FACTOR, KV_CONTEXT
from mmforge.backend.library import read_manifest
from mmforge.backend.vocabulary import GENAI_SECTIONS

log = logging.getLogger(__name__)

# genai_config.json's section -> the manifest's component (its `precisions` keys).
_COMPONENTS = {section: component for component, section in GENAI_SECTIONS.items()}
# The worker process beside the weights: Python, ONNX Runtime, the tokenizer.
WORKER_BYTES = 300_000_000


def _json(path: Path) -> dict[str, Any]:
    from mmforge.backend.untrusted import read_json_file

    data = read_json_file(path, "package")
    return data if isinstance(data, dict) else {}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def package_memory_bytes(folder: Path, ep: str = "cpu") -> int | None:
    """The memory a chat worker holds with the package in `folder` loaded (None: unknown).

    Only the CPU is estimated: on a GPU the weights live in its memory (None there).
    """
    if ep != "cpu":
        return None
    try:
        config = _json(folder / "genai_config.json")
    except MmforgeError:
        return None
    manifest = read_manifest(folder)
    model = config.get("model")
    if not isinstance(model, dict):
        return None
    stored = manifest.get("precisions")
    stored = stored if isinstance(stored, dict) else {}
    dtype = str(manifest.get("dtype", ""))
    total = WORKER_BYTES + _cache_bytes(model, dtype)
    files = {path.name for path in folder.iterdir()} if folder.is_dir() else set()
    for section, component in _COMPONENTS.items():
        part = model.get(section)
        if not isinstance(part, dict) or not isinstance(part.get("filename"), str):
            continue
        name = Path(part["filename"]).name
        if name not in files:
            continue
        weights = _size(folder / name) + _size(folder / f"{name}.data")
        total += int(weights * CPU_LOAD_FACTOR.get(str(stored.get(component, dtype)), 1.0))
    return total


def _cache_bytes(model: dict[str, Any], dtype: str) -> int:
    """The decoder's KV cache for KV_CONTEXT tokens (every layer counted as attending)."""
    decoder = model.get("decoder")
    if not isinstance(decoder, dict):
        return 0
    try:
        layers = int(decoder.get("num_hidden_layers", 0))
        heads = int(decoder.get("num_key_value_heads") or decoder.get("num_attention_heads") or 0)
        head_size = int(decoder.get("head_size", 0))
    except (TypeError, ValueError):
        return 0
    return 2 * layers * heads * head_size * KV_CONTEXT * (2 if dtype == "f16" else 4)
