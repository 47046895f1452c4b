"""GLM-4.1V's decoder graph (backend/families/glm4v/decoder.py) against transformers.

A small random Glm4vTextModel + lm_head (grouped key/value heads, half the head rotated,
M-RoPE sections), its weights put into the graph under the checkpoint's names, run by ONNX
Runtime as the runtime runs a decoder: a prefill with 3-D positions that differ per row (as
a picture's do), then one step on the returned cache, and a padded prefill.
"""

from __future__ import annotations

import numpy as np
import pytest

HIDDEN, HEADS, KV, LAYERS, VOCAB = 128, 4, 2, 2, 120
HEAD_DIM = HIDDEN // HEADS


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    import onnx_ir as ir
    import onnxruntime as ort
    import torch
    from transformers import Glm4vConfig
    from transformers.models.glm4v.modeling_glm4v import Glm4vTextModel

    from mmforge.backend.families import Cfg
    from mmforge.backend.families.glm4v.decoder import decoder_graph

    torch.manual_seed(0)
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
            "mrope_section": [2, 3, 3]}  # fmt: skip
    config = Glm4vConfig(
        text_config={
            "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "num_key_value_heads": KV, "intermediate_size": 96, "vocab_size": VOCAB,
            "rope_parameters": rope,
        }
    )  # fmt: skip
    text = Glm4vTextModel(config.text_config).eval()
    head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
    with torch.no_grad():
        for p in [*text.parameters(), *head.parameters()]:
            p.normal_(0, 0.2)
    graph = decoder_graph(Cfg(config.to_dict()))
    weights = {"model.language_model." + k: v.numpy() for k, v in text.state_dict().items()}
    weights["lm_head.weight"] = head.weight.detach().numpy()
    for name, value in graph.graph.initializers.items():
        if value.const_value is None:
            value.const_value = ir.tensor(weights.pop(name).astype(np.float32), name=name)
    assert list(weights) == ["model.language_model.embed_tokens.weight"]  # the embedding's
    path = tmp_path_factory.mktemp("glm4v") / "decoder.onnx"
    ir.save(graph, path)
    session = ort.InferenceSession(str(path))
    names = [o.name for o in session.get_outputs()]

    def run(embeds, mask, positions, past):
        feeds = {"inputs_embeds": embeds, "attention_mask": mask, "position_ids": positions}
        for i in range(LAYERS):
            feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = past[i]
        return dict(zip(names, session.run(None, feeds), strict=True))

    return text, head, run


def _empty(batch: int = 1):
    return [(np.zeros((batch, KV, 0, HEAD_DIM), np.float32),) * 2 for _ in range(LAYERS)]


def test_prefill_and_a_step_are_transformers(decoder):
    import torch

    text, head, run = decoder
    gen = torch.Generator().manual_seed(1)
    embeds, step = (
        torch.randn(1, 7, HIDDEN, generator=gen),
        torch.randn(1, 1, HIDDEN, generator=gen),
    )
    # text, a 2×2 picture (t = start, h and w by row and column), text
    positions = torch.tensor(
        [[[0, 1, 2, 2, 2, 2, 4]], [[0, 1, 2, 2, 3, 3, 4]], [[0, 1, 2, 3, 2, 3, 4]]]
    )
    with torch.no_grad():
        first = text(inputs_embeds=embeds, position_ids=positions, use_cache=True)
        second = text(
            inputs_embeds=step, position_ids=torch.full((3, 1, 1), 5), cache=first.past_key_values
        )
        expected = head(first.last_hidden_state).numpy(), head(second.last_hidden_state).numpy()
    got = run(embeds.numpy(), np.ones((1, 7), np.int64), positions.numpy(), _empty())
    assert np.abs(got["logits"] - expected[0]).max() < 1e-4
    past = [(got[f"present.{i}.key"], got[f"present.{i}.value"]) for i in range(LAYERS)]
    assert past[0][0].shape == (1, KV, 7, HEAD_DIM)
    nxt = run(step.numpy(), np.ones((1, 8), np.int64), np.full((3, 1, 1), 5, np.int64), past)
    assert np.abs(nxt["logits"] - expected[1]).max() < 1e-4


def test_left_padding_is_masked(decoder):
    import torch

    text, head, run = decoder
    embeds = torch.randn(1, 5, HIDDEN, generator=torch.Generator().manual_seed(2))
    positions = torch.arange(5).view(1, 1, 5).expand(3, 1, 5)
    with torch.no_grad():
        expected = head(text(inputs_embeds=embeds, position_ids=positions).last_hidden_state)
    padded = np.concatenate([np.zeros((1, 2, HIDDEN), np.float32), embeds.numpy()], axis=1)
    mask = np.array([[0, 0, 1, 1, 1, 1, 1]], np.int64)
    pos = np.concatenate([np.zeros((3, 1, 2), np.int64), positions.numpy()], axis=2)
    got = run(padded, mask, pos, _empty())
    assert np.abs(got["logits"][:, 2:] - expected.numpy()).max() < 1e-4


def test_release_rope_names_build_the_same_graph():
    """A release's config.json (transformers 4 names: rope_theta and partial_rotary_factor
    beside rope_scaling's mrope_section) gives the graph transformers 5's names give."""
    import onnx_ir as ir

    from mmforge.backend.families import Cfg
    from mmforge.backend.families.glm4v.decoder import decoder_graph

    text = {"hidden_size": HIDDEN, "num_hidden_layers": 1, "num_attention_heads": HEADS,
            "num_key_value_heads": KV, "intermediate_size": 96, "vocab_size": VOCAB,
            "rms_norm_eps": 1e-5}  # fmt: skip
    new = dict(text, rope_parameters={"rope_type": "default", "rope_theta": 500.0,
               "partial_rotary_factor": 0.5, "mrope_section": [2, 3, 3]})  # fmt: skip
    old = dict(text, rope_theta=500.0, partial_rotary_factor=0.5,
               rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3]})  # fmt: skip

    def consts(config):
        graph = decoder_graph(Cfg({"text_config": config})).graph
        return [ir.serde.serialize_tensor(v.const_value).raw_data
                for v in graph.initializers.values() if v.const_value is not None]  # fmt: skip

    assert consts(new) == consts(old)
    full = {"rope_theta": 500.0, "mrope_section": [4, 6, 6]}  # the whole head rotated
    assert consts(new) != consts(dict(text, rope_parameters=full))
