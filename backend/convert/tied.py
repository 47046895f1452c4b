"""Bytes two components hold alike are stored once: the tied token table of int4/int8.

With tied word embeddings the embedding's GatherBlockQuantized table and the decoder's
MatMulNBits output layer are quantized from the same matrix by the same kernel, in the
same layout: one row of blocks per token, the low nibble first, symmetric with the
default zero point (8 for 4 bits, 128 for 8 bits), one float32 scale per block of 32.
ONNX Runtime's GatherBlockQuantized reads uint8 data by MatMulNBits' conventions, so the
blocks and the scales are the same bytes in both files: [V, H/2] in one, [V, H/32, 16]
in the other (0.19 GB twice in a Qwen2.5-VL-3B int4 package).

ONNX Runtime GenAI 0.18 loads each component as its own session from its own file, but
an initializer's external data may live in any file of the model's folder. So after the
components are written, each embedding initializer whose bytes the decoder's data file
already holds (compared byte for byte, never assumed) points there instead, and the
embedding's data file keeps only the rest (or goes). The package computes exactly what
it computed before: each session reads the same bytes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmforge.backend.convert.package import ONNX_FILES

log = logging.getLogger(__name__)

# Offsets in the rewritten data file keep this alignment (ONNX Runtime maps aligned data).
_ALIGN = 4096
_CHUNK = 4 * 2**20  # compared a chunk at a time: unlike ranges part in the first


@dataclass(frozen=True)
class Shared:
    """What `share_tied_bytes` changed.

    Attributes:
        tensors: The embedding initializers that now read the decoder's data file.
        saved_bytes: Bytes no longer stored twice.
        removed: Files that no longer exist (the embedding's data file, when emptied).
    """

    tensors: tuple[str, ...] = ()
    saved_bytes: int = 0
    removed: tuple[str, ...] = ()


def share_tied_bytes(folder: Path, reader: str = "embedding", owner: str = "decoder") -> Shared:
    """Point `reader`'s initializers at the bytes `owner`'s data file already holds.

    Args:
        folder: The package (staging) folder, with both components written.
        reader: The component whose duplicated initializers are repointed.
        owner: The component whose data file keeps the bytes.

    Returns what was shared (nothing where no initializer's bytes are alike).
    """
    import onnx

    reader_path, owner_path = folder / ONNX_FILES[reader], folder / ONNX_FILES[owner]
    if not reader_path.is_file() or not owner_path.is_file():
        return Shared()
    model = onnx.load(str(reader_path), load_external_data=False)
    own_data = reader_path.name + ".data"
    mine = _extents(model.graph.initializer, own_data)
    owner_data = owner_path.name + ".data"
    theirs = _extents(
        onnx.load(str(owner_path), load_external_data=False).graph.initializer, owner_data
    )
    by_length: dict[int, list[int]] = {}
    for offset, length in theirs.values():
        by_length.setdefault(length, []).append(offset)
    matches: dict[str, int] = {}
    for name, (offset, length) in mine.items():
        for candidate in by_length.get(length, []):
            if length and _same(folder / own_data, offset, folder / owner_data, candidate, length):
                matches[name] = candidate
                break
    if not matches:
        return Shared()
    kept = {name: extent for name, extent in mine.items() if name not in matches}
    removed = _rewrite_data(folder / own_data, kept)
    for tensor in model.graph.initializer:
        if tensor.name in matches:
            _point(tensor, owner_data, matches[tensor.name], mine[tensor.name][1])
        elif tensor.name in kept:
            _point(tensor, own_data, kept[tensor.name][0], kept[tensor.name][1])
    onnx.save(model, str(reader_path))
    saved = sum(mine[name][1] for name in matches)
    log.info(
        "%s reads %d tensors from %s (%d bytes stored once)",
        reader,
        len(matches),
        owner_data,
        saved,
    )
    return Shared(tuple(sorted(matches)), saved, (own_data,) if removed else ())


def _extents(initializers: Any, location: str) -> dict[str, tuple[int, int]]:
    """Initializer name -> (offset, length) of those stored in the data file `location`."""
    out = {}
    for tensor in initializers:
        where = {e.key: e.value for e in tensor.external_data}
        if where.get("location") == location and "length" in where:
            out[tensor.name] = (int(where.get("offset", 0)), int(where["length"]))
    return out


def _same(a: Path, a_offset: int, b: Path, b_offset: int, length: int) -> bool:
    """Whether two byte ranges hold the same bytes, read a chunk at a time."""
    with a.open("rb") as fa, b.open("rb") as fb:
        fa.seek(a_offset)
        fb.seek(b_offset)
        left = length
        while left:
            step = min(_CHUNK, left)
            chunk = fa.read(step)
            if len(chunk) != step or chunk != fb.read(step):
                return False
            left -= step
    return True


def _rewrite_data(path: Path, kept: dict[str, tuple[int, int]]) -> bool:
    """Keep only `kept`'s ranges in the data file, updating their offsets in place.

    Returns whether the file was removed (nothing left in it).
    """
    if not kept:
        path.unlink()
        return True
    new = path.with_name(path.name + ".tmp")
    with path.open("rb") as src, new.open("wb") as dst:
        for name, (offset, length) in sorted(kept.items(), key=lambda item: item[1][0]):
            position = -dst.tell() % _ALIGN
            dst.write(b"\0" * position)
            kept[name] = (dst.tell(), length)
            src.seek(offset)
            left = length
            while left:
                chunk = src.read(min(_CHUNK, left))
                dst.write(chunk)
                left -= len(chunk)
    new.replace(path)
    return False


def _point(tensor: Any, location: str, offset: int, length: int) -> None:
    from onnx import TensorProto

    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    tensor.data_location = TensorProto.EXTERNAL
