"""Which model a checkpoint holds: digests of its config and its weights.

A conversion records them in the package's manifest, so two packages converted from one
checkpoint, one by its hub id and one from a local copy, are known for packages of one
model (the Compare page), whatever their source strings say.

- The config digest: sha256 of config.json's settings, with the keys that name where or
  when it was saved (`_name_or_path`, `transformers_version`, the dtype) left out, in a
  canonical JSON form, so a copy reformatted by another tool still matches.
- The weights digest: every tensor's dtype, shape and a sample of its bytes (the whole of
  a small tensor; eight 4 KiB windows, first and last included, of a large one), hashed,
  and the tensors' digests hashed in sorted order. Names and shards do not enter: a copy
  saved under newer transformers names, or in other shards, still matches. Training
  changes nearly every value of a tensor it touches, so a fine-tune differs in the
  windows; an edit of a few values outside them would not (such a package then counts
  as the same model). Measured by benchmarks/digest.py on the 7.5 GB, 824-tensor
  Qwen2.5-VL-3B-shaped checkpoint: 0.13 s (0.03 s with the files cached), where sha256
  of every byte took 9.5 s.

The digests name their scheme: digests made another way never compare equal.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import struct
from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.tensors import DTYPE_BYTES, safetensors_headers
from mmforge.backend.untrusted import read_json_file

log = logging.getLogger(__name__)

CONFIG_SCHEME = "config-sha256-v1"
WEIGHTS_SCHEME = "tensors-sampled-sha256-v1"
# Keys that say where, when or in which dtype a config was saved, not which model it is.
_VOLATILE = frozenset(
    {"_name_or_path", "transformers_version", "_commit_hash", "torch_dtype", "dtype"}
)
SAMPLES = 8
WINDOW = 4096


def config_digest(folder: Path, config: dict[str, Any] | None = None) -> str | None:
    """The digest of `folder`'s config.json settings (None: none, or not JSON).

    `config` is config.json as already parsed and as written, so that it is not read again.
    """
    if config is None:
        try:
            config = read_json_file(folder / "config.json", "model")
        except MmforgeError:
            return None
    text = json.dumps(_settled(config), sort_keys=True, separators=(",", ":"))
    return f"{CONFIG_SCHEME}:{hashlib.sha256(text.encode()).hexdigest()}"


def _settled(value: Any) -> Any:
    """`value` without the volatile keys, at every depth (sub-configs have them too)."""
    if isinstance(value, dict):
        return {k: _settled(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_settled(v) for v in value]
    return value


def windows(nbytes: int) -> list[tuple[int, int]]:
    """The byte ranges [start, end) of a tensor's data that its digest reads."""
    if nbytes <= SAMPLES * WINDOW:
        return [(0, nbytes)]
    step = (nbytes - WINDOW) / (SAMPLES - 1)
    return [(round(k * step), round(k * step) + WINDOW) for k in range(SAMPLES)]


def weights_digest(folder: Path) -> str | None:
    """The digest of `folder`'s safetensors weights (None: none, or unreadable).

    Raises nothing: a checkpoint whose weights cannot be read for this has no digest.
    """
    try:
        headers = safetensors_headers(folder)
    except MmforgeError:
        return None
    if headers is None:
        return None  # pickled weights (--allow-pickle): not read here
    digests: list[str] = []
    try:
        for path, header in headers.items():
            with path.open("rb") as f:
                (length,) = struct.unpack("<Q", f.read(8))
                base = 8 + length
                for name, meta in header.items():
                    if name != "__metadata__":
                        digests.append(_tensor_digest(f, base, meta))
    except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
        log.warning("no weights digest for %s: %s", folder, e)
        return None
    whole = hashlib.sha256("\n".join(sorted(digests)).encode())
    return f"{WEIGHTS_SCHEME}:{whole.hexdigest()}"


def _tensor_digest(f: Any, base: int, meta: dict[str, Any]) -> str:
    dtype, shape = str(meta["dtype"]), [int(d) for d in meta["shape"]]
    start, end = (int(x) for x in meta["data_offsets"])
    nbytes = end - start
    if nbytes != math.prod(shape) * DTYPE_BYTES.get(dtype, 0) and dtype in DTYPE_BYTES:
        raise ValueError(f"a tensor of {shape} {dtype} holds {nbytes} bytes")
    h = hashlib.sha256(f"{dtype}{shape}{nbytes}".encode())
    for a, b in windows(nbytes):
        f.seek(base + start + a)
        data = f.read(b - a)
        if len(data) != b - a:
            raise ValueError("the file ends inside a tensor")
        h.update(data)
    return h.hexdigest()


def checkpoint_digest(folder: Path, config: dict[str, Any] | None = None) -> dict[str, str]:
    """The manifest's `checkpoint_digest`: {"config": …, "weights": …}, each where known.

    `config`: config.json as written, already parsed (else it is read).
    """
    found = {"config": config_digest(folder, config), "weights": weights_digest(folder)}
    return {k: v for k, v in found.items() if v is not None}
