"""Tiny and release-shaped GLM-4.5V checkpoints, with GLM-4.5's mixture-of-experts decoder.

GLM-4.1V's tokens, template and picture settings.

The text model keeps every mechanism of the release at a small scale: a dense first layer
(`first_k_dense_replace`), then expert layers with a shared expert; the router's groups
(`n_group` 4, `topk_group` 2, where the release has one group) so that group-limited
routing is exercised; an `e_score_correction_bias` drawn away from zero (it is a buffer,
which the tiny builder's redraw leaves at transformers' zeros) so that choosing by it and
weighting without it differ; `head_dim` apart from hidden / heads, as in the release
(128 against 4096 / 96).
"""

from __future__ import annotations

from typing import Any

from mmforge.backend.families.glm4v.tiny import EOS, PREPROCESSOR, SPECIALS, TOKENIZER, token_ids
from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec, released_template

# 64 wide over 4 heads of 24 (half rotated: 12 dims, 6 frequencies in M-RoPE sections
# 2 + 2 + 2), two key/value heads; 8 experts of width 24 in 4 groups, 3 a token.
TEXT = {
    "hidden_size": 64,
    "head_dim": 24,
    "intermediate_size": 96,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "attention_bias": True,
    "moe_intermediate_size": 24,
    "n_routed_experts": 8,
    "num_experts_per_tok": 3,
    "n_group": 4,
    "topk_group": 2,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "routed_scaling_factor": 2.5,
    "norm_topk_prob": True,
}
VISION = {
    "depth": 2,
    "hidden_size": 32,
    "num_heads": 2,
    "intermediate_size": 64,
    "image_size": 56,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
}
# The correction bias's spread: the tiny router's sigmoid scores spread about as much.
BIAS_STD = 0.2


def _config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Glm4vMoeConfig

    text = {
        **TEXT,
        "vocab_size": vocab,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
            "mrope_section": [2, 2, 2],
        },
        "pad_token_id": s["<|endoftext|>"],
        "eos_token_id": [s[t] for t in EOS],
    }
    vision = {**VISION, "out_hidden_size": TEXT["hidden_size"]}
    return Glm4vMoeConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=False, **token_ids(s)
    )


def correction_bias(model: Any, seed: int) -> None:
    """Draw each router's `e_score_correction_bias` (a buffer) away from zero."""
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, buffer in sorted(model.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("e_score_correction_bias"):
                buffer.copy_(torch.randn(buffer.shape, generator=gen) * BIAS_STD)


GLM4V_MOE = TinySpec(
    family_key="glm4v_moe",
    hf_class="Glm4vMoeForConditionalGeneration",
    specials=SPECIALS,
    make_config=_config,
    # GLM-4.1V's released template (resources/glm4v_chat_template.jinja): no copy of
    # GLM-4.5V's own was found offline (see RELEASED below).
    chat_template=released_template("glm4v"),
    tokenizer_extra=TOKENIZER,
    preprocessor=PREPROCESSOR,
    eos_tokens=EOS,
    adjust_model=correction_bias,
)


def glm45v_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """zai-org/GLM-4.5V's config.json (transformers 4.57), reconstructed, shrunk.

    No copy of the file itself was found in the stored code. The values are the ones a
    model-information report in a public GitHub repository prints for the release as
    transformers 5.7 loads it (find_string '"model_type": "glm4v_moe_text"'; the same
    report lists the release's 18,106 tensors: layers 0-45 only, per-expert
    `mlp.experts.<e>.gate_proj/up_proj/down_proj.weight`, `mlp.gate.weight`,
    `mlp.gate.e_score_correction_bias` (float32), `mlp.shared_experts.*`, a dense layer 0,
    a separate `lm_head.weight`; no next-n / MTP layer). The transformers 4 layout of
    text_config (`rope_theta` and `partial_rotary_factor` beside `rope_scaling`
    {"rope_type": "default", "mrope_section": [8, 12, 12]}, `use_qk_norm` false,
    `head_dim` 128) follows a GLM-4.5V test fixture in a public repository (a checkpoint
    converter's, "based on GLM-4.5 Air structure", transformers 4.57.1) and transformers'
    GLM-4.5V conversion script's key list. Sizes of the release: hidden 4096, 46 layers,
    96 heads of 128, 8 key/value heads, intermediate 10944, 128 experts of 1408 (8 a
    token, one group), one shared expert, first_k_dense_replace 1, vocab 151552; tower
    depth 24, width 1536, 12 heads, intermediate 10944, 336 px. Shrunk: widths, depths,
    heads, experts (8 in 4 groups, 2 kept, 3 a token: the release's single group would
    leave group routing untested), the vocabulary and the M-RoPE sections (kept over half
    of each head); the tower keeps 336 px.
    """
    return {
        "architectures": ["Glm4vMoeForConditionalGeneration"],
        "model_type": "glm4v_moe",
        "text_config": {
            "model_type": "glm4v_moe_text",
            "attention_bias": True,
            "attention_dropout": 0.0,
            "pad_token_id": s["<|endoftext|>"],
            "eos_token_id": [s[t] for t in EOS],
            "image_start_token_id": s["<|begin_of_image|>"],
            "image_end_token_id": s["<|end_of_image|>"],
            "image_token_id": s["<|image|>"],
            "first_k_dense_replace": 1,
            "head_dim": 24,
            "hidden_act": "silu",
            "hidden_size": 64,
            "initializer_range": 0.02,
            "intermediate_size": 96,
            "max_position_embeddings": 65536,
            "moe_intermediate_size": 24,
            "n_group": 4,
            "n_routed_experts": 8,
            "n_shared_experts": 1,
            "norm_topk_prob": True,
            "num_attention_heads": 4,
            "num_experts_per_tok": 3,
            "num_hidden_layers": 3,
            "num_key_value_heads": 2,
            "partial_rotary_factor": 0.5,
            "rms_norm_eps": 1e-05,
            "rope_scaling": {"rope_type": "default", "mrope_section": [2, 2, 2]},
            "rope_theta": 10000.0,
            "routed_scaling_factor": 1.0,
            "topk_group": 2,
            "torch_dtype": "bfloat16",
            "use_cache": True,
            "use_qk_norm": False,
            "vocab_size": vocab,
        },
        "vision_config": {
            "model_type": "glm4v_moe",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "depth": 2,
            "hidden_act": "silu",
            "hidden_size": 32,
            "image_size": 336,
            "in_channels": 3,
            "initializer_range": 0.02,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "patch_size": 14,
            "rms_norm_eps": 1e-05,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        **token_ids(s),
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.0.dev0",
    }


RELEASED = (
    ReleaseSpec(
        key="glm4v_moe-106b-a12b",
        release="zai-org/GLM-4.5V",
        tiny=GLM4V_MOE,
        config_json=glm45v_release,
        # No copy of GLM-4.5V's chat template text was found offline; the checkpoint
        # carries GLM-4.1V's released one, the family's (test_released.NOT_FOUND).
    ),
)
