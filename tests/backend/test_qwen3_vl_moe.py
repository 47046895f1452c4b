"""Qwen3-VL MoE: the experts as transformers picks, routes and stores them."""

from __future__ import annotations

import json

from mmforge.backend.families.qwen.qwen3_vl_moe import sparse_layers, split_experts
from mmforge.backend.inspect import inspect_source


def test_sparse_layers_follow_transformers_rule():
    import transformers

    text = {"num_hidden_layers": 6, "num_experts": 4, "decoder_sparse_step": 2}
    assert sparse_layers({**text, "mlp_only_layers": [3]}) == [1, 5]
    assert sparse_layers({**text, "decoder_sparse_step": 1}) == list(range(6))
    # The same layers transformers gives a sparse block.
    config = transformers.Qwen3VLMoeTextConfig(
        hidden_size=16,
        intermediate_size=32,
        moe_intermediate_size=8,
        num_hidden_layers=6,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_experts=4,
        num_experts_per_tok=2,
        decoder_sparse_step=2,
        mlp_only_layers=[3],
        vocab_size=32,
    )
    model = transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe.Qwen3VLMoeTextModel(config)
    sparse = [i for i, layer in enumerate(model.layers) if hasattr(layer.mlp, "experts")]
    assert sparse == sparse_layers(config) == [1, 5]


def test_both_expert_layouts_split_into_the_same_per_expert_weights():
    import torch

    experts, hidden, inner = 3, 10, 4
    gate_up = torch.randn(experts, 2 * inner, hidden)  # transformers 5's in-memory layout
    down = torch.randn(experts, hidden, inner)
    name = "model.language_model.layers.0.mlp.experts."
    held = split_experts({name + "gate_up_proj": gate_up, name + "down_proj": down}, inner, hidden)
    released = split_experts(
        {
            name + "gate_up_proj": gate_up.transpose(1, 2).contiguous(),  # as released
            name + "down_proj": down.transpose(1, 2).contiguous(),
        },
        inner,
        hidden,
    )
    assert set(held) == set(released) and len(held) == 3 * experts
    for key, value in held.items():
        assert torch.equal(value, released[key]), key
    assert torch.equal(held[name + "1.gate_proj.weight"], gate_up[1, :inner])
    assert torch.equal(held[name + "1.up_proj.weight"], gate_up[1, inner:])
    assert torch.equal(held[name + "2.down_proj.weight"], down[2])


def test_inspect_names_the_qwen3_vl_pipeline_and_the_experts(tiny):
    profile = inspect_source(str(tiny("qwen3_vl_moe")))
    assert profile.runnable and profile.pipeline_type == "qwen3_vl"
    assert profile.family_key == "qwen3_vl_moe"
    line = profile.architecture[0]
    assert "2 of 3 layers (dense MLP at layer 1)" in line
    assert "6 routed experts of width 24, 2 active per token" in line
    assert "no shared expert" in line
    sizes = profile.sizes
    assert sizes.active_parameters is not None
    assert sizes.active_parameters < sizes.parameters["total"]


def test_a_release_shaped_checkpoint_stores_its_experts_as_released(tiny_root):
    from safetensors import safe_open

    from mmforge.backend.families.qwen.tiny_qwen3_vl_moe import RELEASED_QWEN3_VL_MOE
    from mmforge.backend.tiny.release import write_release

    folder = write_release(RELEASED_QWEN3_VL_MOE[0], tiny_root / "qwen3_vl_moe-layout").folder
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shapes = {}
    for name, file in index["weight_map"].items():
        with safe_open(folder / file, "pt") as f:
            shapes[name] = f.get_slice(name).get_shape()
    prefix = "model.language_model.layers.0.mlp."
    assert shapes[prefix + "experts.gate_up_proj"] == [8, 64, 48]  # [E, H, 2I]
    assert shapes[prefix + "experts.down_proj"] == [8, 24, 64]  # [E, I, H]
    assert shapes[prefix + "gate.weight"] == [8, 64]
    assert "lm_head.weight" in shapes
    profile = inspect_source(str(folder))
    assert "Mixture of experts on every layer: 8 routed experts" in profile.architecture[0]


def test_gate_and_up_swapped_fails_verify_at_the_decoder(tiny, tmp_path, monkeypatch):
    """Not vacuous: a package whose experts' gate and up rows are swapped FAILs."""
    from mmforge.backend.convert import convert
    from mmforge.backend.families.qwen import qwen3_vl_moe
    from mmforge.backend.verify import verify

    folder = tiny("qwen3_vl_moe")

    def swapped(state, inner, hidden):
        out = split_experts(state, inner, hidden)
        for key in [k for k in out if k.endswith(".gate_proj.weight")]:
            up = key.replace(".gate_proj.", ".up_proj.")
            out[key], out[up] = out[up], out[key]
        return out

    monkeypatch.setattr(qwen3_vl_moe, "split_experts", swapped)
    convert(str(folder), tmp_path / "pkg")
    monkeypatch.undo()
    report = verify(tmp_path / "pkg", str(folder), tokens=4)
    assert report.verdict == "FAIL" and report.first_divergent_stage == "decoder_prefill"
