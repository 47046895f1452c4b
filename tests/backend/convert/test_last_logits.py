"""Every family's decoder computes the last position's logits; verify's copy computes all.

backend/last_logits.py: the package's decoder declares `logits` [batch, 1, vocab]
(the runtime's `Model::IsPruned`), and `unpruned` gives verify the same graph with every
position, whose last row is the package's own.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.backend.families import TESTED


def _shape(model) -> list:
    out = next(o for o in model.graph.output if o.name == "logits")
    return [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim]


@pytest.mark.parametrize("family", TESTED)
def test_every_familys_decoder_is_pruned_and_verify_sees_every_position(package, family):
    import onnx

    from mmforge.backend.last_logits import PRUNE, unpruned

    folder = package(family)
    model = onnx.load(str(folder / "decoder.onnx"), load_external_data=False)
    assert any(n.name == PRUNE for n in model.graph.node), family
    assert _shape(model)[1] == 1
    whole = unpruned(folder / "decoder.onnx")
    assert whole is not None and not any(n.name == PRUNE for n in whole.graph.node)
    assert _shape(whole)[1] == "sequence_length"
    notes = json.loads((folder / "mmforge_manifest.json").read_text())["notes"]
    assert any(n.startswith("Decoder: the output layer runs on the last position") for n in notes)


@pytest.mark.parametrize("dtype", ["f32", "int4"])
def test_the_pruned_row_is_the_last_row_of_every_position(package, dtype):
    """The package's decoder and verify's unpruned copy on the same prefill: one row, and
    every row whose last is that one (int4: the output layer is MatMulNBits)."""
    import onnxruntime as ort

    from mmforge.backend.verify import sessions

    folder = package("qwen2_5_vl", dtype)
    model_cfg = json.loads((folder / "genai_config.json").read_text())["model"]
    pruned = ort.InferenceSession(str(folder / "decoder.onnx"), providers=["CPUExecutionProvider"])
    whole = sessions.open_session(folder, model_cfg, "decoder")
    rng = np.random.default_rng(0)
    hidden = int(model_cfg["decoder"]["hidden_size"])
    head = int(model_cfg["decoder"]["head_size"])
    feeds = {}
    for spec in pruned.get_inputs():
        if spec.name == "inputs_embeds":
            feeds[spec.name] = rng.normal(0, 1, (1, 7, hidden)).astype(np.float32)
        elif spec.name == "attention_mask":
            feeds[spec.name] = np.ones((1, 7), np.int64)
        elif spec.name == "position_ids":
            feeds[spec.name] = np.broadcast_to(np.arange(7), (3, 1, 7)).astype(np.int64).copy()
    feeds.update(sessions.empty_past({i.name: i for i in pruned.get_inputs()}, head))
    feeds = sessions.cast(pruned, feeds)
    names = [o.name for o in pruned.get_outputs()]
    one = dict(zip(names, pruned.run(None, feeds), strict=True))["logits"]
    every = sessions.run_named(whole, feeds)["logits"]
    assert one.shape[1] == 1 and every.shape[1] == 7
    assert np.allclose(one[:, 0], every[:, -1], atol=1e-5, rtol=1e-5)
    assert not np.allclose(every[:, 0], every[:, -1])  # the rows differ: all were computed
