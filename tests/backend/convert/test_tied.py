"""A tied token table is stored once in int4/int8 packages (convert/tied.py)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from mmforge.backend.convert import convert, tied


def _where(model: onnx.ModelProto, names: set[str]) -> dict[str, tuple[str, int, int]]:
    """Initializer name -> (data file, offset, length) for the named external initializers."""
    out = {}
    for tensor in model.graph.initializer:
        if tensor.name in names and tensor.external_data:
            where = {e.key: e.value for e in tensor.external_data}
            out[tensor.name] = (where["location"], int(where["offset"]), int(where["length"]))
    return out


def _data_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.onnx.data"))


def _greedy(folder: Path, tokens: int = 12) -> list[int]:
    from mmforge import resources
    from mmforge.backend.runtime import Runtime

    runtime = Runtime(folder)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}]
    inputs = runtime.process(runtime.prompt(messages), [resources.probe_image()])
    return runtime.greedy(inputs, tokens)


@pytest.mark.parametrize("dtype", ["int4", "int8"])
def test_a_tied_quantized_table_is_stored_once(tiny, package, tmp_path, monkeypatch, dtype):
    """Gemma 3 ties its output layer to the token table: the embedding's GatherBlockQuantized
    reads the blocks and scales of the decoder's MatMulNBits output layer from the decoder's
    data file, the embedding keeps no data file, and the package is smaller by exactly those
    bytes while it generates the same tokens as one that stores them twice."""
    out = package("gemma3", dtype)
    embedding = onnx.load(str(out / "embedding.onnx"), load_external_data=False)
    (gather,) = [n for n in embedding.graph.node if n.op_type == "GatherBlockQuantized"]
    shared = _where(embedding, {gather.input[0], gather.input[2]})
    assert {location for location, _, _ in shared.values()} == {"decoder.onnx.data"}
    assert not (out / "embedding.onnx.data").exists()
    decoder = onnx.load(str(out / "decoder.onnx"), load_external_data=False)
    blocks, scales = (shared[gather.input[i]][1:] for i in (0, 2))
    readers = {
        (where[1], where[2]): index
        for index, node in enumerate(decoder.graph.node)
        if node.op_type == "MatMulNBits"
        for where in _where(decoder, {node.input[1], node.input[2]}).values()
    }
    assert blocks in readers and scales in readers  # the decoder's own output layer reads them
    assert readers[blocks] == readers[scales]  # one node: the output layer

    monkeypatch.setattr(tied, "share_tied_bytes", lambda *args, **kwargs: tied.Shared())
    twice = tmp_path / "twice"
    convert(str(tiny("gemma3")), twice, dtype=dtype)
    stored_twice = (twice / "embedding.onnx.data").stat().st_size
    assert stored_twice >= blocks[1] + scales[1]
    assert _data_bytes(out) == _data_bytes(twice) - stored_twice
    assert _greedy(out) == _greedy(twice)
