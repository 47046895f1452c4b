"""GLM-4.5V's decoder graph (backend/families/glm4v/decoder_moe.py) against transformers.

A small random Glm4vMoeTextModel + lm_head: a dense first layer then mixture-of-experts
layers (8 experts in 4 groups, 2 groups kept, 3 experts a token, a shared expert, a
routing scale, a non-zero e_score_correction_bias), head_dim set apart from
hidden / heads, half of each head rotated by halves with M-RoPE sections; its weights put
into the graph under the checkpoint's names (the experts split per expert as the release
stores them), run by ONNX Runtime as the runtime runs a decoder: a prefill with 3-D
positions that differ per row, then one step on the returned cache, and a padded prefill.
"""

from __future__ import annotations

import numpy as np
import pytest

HIDDEN, HEADS, KV, LAYERS, VOCAB, HEAD_DIM = 64, 4, 2, 3, 120, 24
TEXT = {
    "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
    "num_key_value_heads": KV, "head_dim": HEAD_DIM, "intermediate_size": 80,
    "vocab_size": VOCAB, "moe_intermediate_size": 40, "n_routed_experts": 8,
    "num_experts_per_tok": 3, "n_group": 4, "topk_group": 2, "n_shared_experts": 1,
    "first_k_dense_replace": 1, "routed_scaling_factor": 1.7, "norm_topk_prob": True,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                        "partial_rotary_factor": 0.5, "mrope_section": [2, 2, 2]},
}  # fmt: skip


def _model(text_cfg: dict, seed: int = 0):
    import onnx_ir as ir
    import torch
    from transformers import Glm4vMoeConfig
    from transformers.models.glm4v_moe.modeling_glm4v_moe import Glm4vMoeTextModel

    from mmforge.backend.families import Cfg
    from mmforge.backend.families.glm4v.decoder_moe import moe_decoder_graph
    from mmforge.backend.families.qwen.qwen3_vl_moe import split_experts

    torch.manual_seed(seed)
    config = Glm4vMoeConfig(text_config=text_cfg)
    text = Glm4vMoeTextModel(config.text_config).eval()
    head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
    with torch.no_grad():
        for p in [*text.parameters(), *head.parameters()]:
            p.normal_(0, 0.2)
        for name, b in text.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0, 0.3)
    graph = moe_decoder_graph(Cfg(config.to_dict()))
    state = {"model.language_model." + k: v for k, v in text.state_dict().items()}
    state = split_experts(state, int(text_cfg["moe_intermediate_size"]), HIDDEN)
    weights = {k: v.detach().float().numpy() for k, v in state.items()}
    weights["lm_head.weight"] = head.weight.detach().numpy()
    for name, value in graph.graph.initializers.items():
        if value.const_value is None:
            value.const_value = ir.tensor(weights.pop(name).astype(np.float32), name=name)
    assert list(weights) == ["model.language_model.embed_tokens.weight"]  # the embedding's
    return text, head, graph


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    import onnx_ir as ir
    import onnxruntime as ort

    text, head, graph = _model(TEXT)
    path = tmp_path_factory.mktemp("glm4v_moe") / "decoder.onnx"
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
    positions = torch.tensor(
        [[[0, 1, 2, 2, 2, 2, 4]], [[0, 1, 2, 2, 3, 3, 4]], [[0, 1, 2, 3, 2, 3, 4]]]
    )
    with torch.no_grad():
        out = text(inputs_embeds=embeds, position_ids=positions, use_cache=True)
        expected = head(out.last_hidden_state).numpy()
        nxt = text(inputs_embeds=step, position_ids=torch.full((3, 1, 1), 5),
                   cache=out.past_key_values, use_cache=True)  # fmt: skip
        expected_step = head(nxt.last_hidden_state).numpy()
    got = run(embeds.numpy(), np.ones((1, 7), np.int64), positions.numpy(), _empty())
    assert np.abs(got["logits"] - expected).max() < 1e-4
    past = [(got[f"present.{i}.key"], got[f"present.{i}.value"]) for i in range(LAYERS)]
    got_step = run(step.numpy(), np.ones((1, 8), np.int64), np.full((3, 1, 1), 5, np.int64), past)
    assert np.abs(got_step["logits"] - expected_step).max() < 1e-4


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


@pytest.mark.parametrize(
    "change",
    [{"n_group": 1, "topk_group": 1}, {"norm_topk_prob": False, "routed_scaling_factor": 1.0},
     {"first_k_dense_replace": 2, "n_shared_experts": 2}],
    ids=["one-group", "unnormalised", "two-dense-two-shared"],
)  # fmt: skip
def test_router_settings_are_honoured(change, tmp_path):
    """Other routing settings: the graph follows transformers there too."""
    import onnx_ir as ir
    import onnxruntime as ort
    import torch

    text, head, graph = _model({**TEXT, **change}, seed=3)
    ir.save(graph, tmp_path / "d.onnx")
    session = ort.InferenceSession(str(tmp_path / "d.onnx"))
    embeds = torch.randn(1, 6, HIDDEN, generator=torch.Generator().manual_seed(4))
    positions = torch.arange(6).view(1, 1, 6).expand(3, 1, 6)
    with torch.no_grad():
        expected = head(text(inputs_embeds=embeds, position_ids=positions).last_hidden_state)
    feeds = {"inputs_embeds": embeds.numpy(), "attention_mask": np.ones((1, 6), np.int64),
             "position_ids": positions.numpy().copy()}  # fmt: skip
    for i, (k, v) in enumerate(_empty()):
        feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = k, v
    logits = session.run(["logits"], feeds)[0]
    assert np.abs(logits - expected.numpy()).max() < 1e-4
