"""Tiny Qwen3.5 / Qwen3.6 checkpoints (dense and MoE), and ones shaped like the releases.

The hybrid text model keeps every mechanism at a small scale: Gated DeltaNet layers and
gated full-attention layers in an irregular order (the releases put full attention on
every 4th layer; a converter that assumes that pattern fails on the tiny one), partial
rotary with interleaved M-RoPE, q/k norms and the attention output gate. The chat
template is the one Qwen3.6 ships (resources/qwen3_6_chat_template.jinja), so prompts
end in a `<think>` line as the releases' do.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from mmforge.backend.families.qwen.tiny import QWEN_SPECIALS, QWEN_TOKENIZER, qwen_ids
from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec

# Qwen's special tokens, then the thinking markers the released template writes.
_SPECIALS = [*QWEN_SPECIALS, "<think>", "</think>"]
_TOKENIZER = QWEN_TOKENIZER
_PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "merge_size": 2,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "resample": 3,
    "rescale_factor": 1 / 255,
    "size": {"shortest_edge": 32 * 32 * 4, "longest_edge": 32 * 32 * 64},
}
# Irregular on purpose: linear, full, linear, linear, full.
TINY_LAYERS = [
    "linear_attention",
    "full_attention",
    "linear_attention",
    "linear_attention",
    "full_attention",
]


def released_chat_template() -> str:
    """The chat template Qwen3.6 releases ship (thinking, tools, vision counting)."""
    return (
        resources.files("mmforge.resources")
        .joinpath("qwen3_6_chat_template.jinja")
        .read_text(encoding="utf-8")
    )


def _text(s: dict[str, int], vocab: int, layers: list[str]) -> dict[str, Any]:
    return {
        "vocab_size": vocab,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": len(layers),
        "layer_types": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
            "partial_rotary_factor": 0.25,
        },
        "bos_token_id": s["<|endoftext|>"],
        "eos_token_id": s["<|im_end|>"],
        "tie_word_embeddings": False,
    }


_VISION = {
    "depth": 2,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "out_hidden_size": 64,
    "num_position_embeddings": 64,
}
_MOE = {
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 48,
    "num_experts": 8,
    "num_experts_per_tok": 2,
}


def _dense_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Qwen3_5Config

    return Qwen3_5Config(
        text_config=_text(s, vocab, TINY_LAYERS),
        vision_config=_VISION,
        tie_word_embeddings=False,
        **qwen_ids(s),
    )


def _moe_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Qwen3_5MoeConfig

    text = {**_text(s, vocab, TINY_LAYERS), **_MOE}
    text.pop("intermediate_size")
    return Qwen3_5MoeConfig(
        text_config=text, vision_config=_VISION, tie_word_embeddings=False, **qwen_ids(s)
    )


QWEN3_5 = TinySpec(
    family_key="qwen3_5",
    hf_class="Qwen3_5ForConditionalGeneration",
    specials=_SPECIALS,
    make_config=_dense_config,
    chat_template=released_chat_template(),
    tokenizer_extra=_TOKENIZER,
    preprocessor=_PREPROCESSOR,
    eos_tokens=["<|im_end|>", "<|endoftext|>"],
)
QWEN3_5_MOE = TinySpec(
    family_key="qwen3_5_moe",
    hf_class="Qwen3_5MoeForConditionalGeneration",
    specials=_SPECIALS,
    make_config=_moe_config,
    chat_template=released_chat_template(),
    tokenizer_extra=_TOKENIZER,
    preprocessor=_PREPROCESSOR,
    eos_tokens=["<|im_end|>", "<|endoftext|>"],
)


# The released configs (transformers 4.57 layout: everything of the text model under
# text_config, `layer_types` written out, the fields transformers does not read kept:
# attn_output_gate, output_gate_type, mamba_ssm_dtype, mtp_*), shrunk in width, depth,
# experts and vocabulary. Qwen3.5-0.8B: 24 layers, full attention every 4th, tied
# embeddings, a 12-block tower; Qwen3.6-35B-A3B: 40 layers, 256 experts (8 active) and a
# shared expert, a 27-block tower.
def _release_text(
    s: dict[str, int], vocab: int, layers: int, *, tied: bool, moe: bool
) -> dict[str, Any]:
    text: dict[str, Any] = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "bos_token_id": s["<|endoftext|>"],
        "dtype": "bfloat16",
        "eos_token_id": s["<|im_end|>"],
        "full_attention_interval": 4,
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 128,
        "layer_types": [
            "full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)
        ],
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_value_head_dim": 16,
        "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 262144,
        "model_type": "qwen3_5_moe_text" if moe else "qwen3_5_text",
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False,
        "num_attention_heads": 4,
        "num_hidden_layers": layers,
        "num_key_value_heads": 2,
        "output_gate_type": "swish",
        "pad_token_id": None,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": [2, 1, 1],
            "partial_rotary_factor": 0.25,
            "rope_theta": 10000000,
            "rope_type": "default",
        },
        "tie_word_embeddings": tied,
        "use_cache": True,
        "vocab_size": vocab,
    }
    if moe:
        del text["intermediate_size"]
        text.update(
            {
                "moe_intermediate_size": 32,
                "num_experts": 8,
                "num_experts_per_tok": 2,
                "output_router_logits": False,
                "router_aux_loss_coef": 0.001,
                "shared_expert_intermediate_size": 48,
            }
        )
    return text


def release_config(s: dict[str, int], vocab: int, *, moe: bool) -> dict[str, Any]:
    """The released config.json text, shrunk (Qwen3.5-0.8B; Qwen3.6-35B-A3B with `moe`)."""
    tied = not moe
    return {
        "architectures": [
            "Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"
        ],
        "image_token_id": s["<|image_pad|>"],
        "language_model_only": False,
        "model_type": "qwen3_5_moe" if moe else "qwen3_5",
        "text_config": _release_text(s, vocab, 8 if moe else 4, tied=tied, moe=moe),
        "tie_word_embeddings": tied,
        "transformers_version": "4.57.1",
        "video_token_id": s["<|video_pad|>"],
        "vision_config": {
            "deepstack_visual_indexes": [],
            "depth": 2,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": 32,
            "in_channels": 3,
            "initializer_range": 0.02,
            "intermediate_size": 64,
            "model_type": "qwen3_5",
            "num_heads": 2,
            "num_position_embeddings": 64,
            "out_hidden_size": 64,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        "vision_end_token_id": s["<|vision_end|>"],
        "vision_start_token_id": s["<|vision_start|>"],
    }


def mtp_tensors(weights: dict[str, Any]) -> dict[str, Any]:
    """The multi-token-prediction head the releases ship beside the model (`mtp.*`).

    transformers skips it on load (`_keys_to_ignore_on_load_unexpected`); generation
    never uses it. Shaped from the model's own layer 3 (a full-attention layer) and its
    embedding width.
    """
    import torch

    hidden = weights["model.language_model.norm.weight"].shape[0]
    gen = torch.Generator().manual_seed(7)
    out = {
        "mtp.fc.weight": torch.randn((hidden, 2 * hidden), generator=gen),
        "mtp.norm.weight": torch.ones(hidden),
        "mtp.pre_fc_norm_embedding.weight": torch.ones(hidden),
        "mtp.pre_fc_norm_hidden.weight": torch.ones(hidden),
    }
    prefix = "model.language_model.layers.3."
    for name, tensor in weights.items():
        if name.startswith(prefix):
            out["mtp.layers.0." + name[len(prefix) :]] = torch.randn(tensor.shape, generator=gen)
    return {k: v.to(torch.bfloat16) for k, v in out.items()}


def with_mtp(weights: dict[str, Any]) -> dict[str, Any]:
    """The weights and the release's `mtp.*` tensors."""
    return {**weights, **mtp_tensors(weights)}


def fused_experts(weights: dict[str, Any]) -> dict[str, Any]:
    """The experts fused as transformers 5 holds them in memory.

    `experts.gate_up_proj` [E, 2I, H] (each expert's gate rows, then its up rows) and
    `experts.down_proj` [E, H, I]. (transformers' `save_pretrained` writes one tensor per
    expert, as the original releases do; checkpoints saved by tools that keep the
    in-memory layout have these.)
    """
    import re

    import torch

    experts: dict[str, dict[int, dict[str, Any]]] = {}
    out: dict[str, Any] = {}
    pattern = re.compile(r"(.*\.mlp\.experts\.)(\d+)\.(gate_proj|up_proj|down_proj)\.weight")
    for name, tensor in weights.items():
        match = pattern.fullmatch(name)
        if match is None:
            out[name] = tensor
            continue
        base, index, kind = match.group(1), int(match.group(2)), match.group(3)
        experts.setdefault(base, {}).setdefault(index, {})[kind] = tensor
    for base, by_index in experts.items():
        order = sorted(by_index)
        out[base + "gate_up_proj"] = torch.stack(
            [torch.cat([by_index[e]["gate_proj"], by_index[e]["up_proj"]]) for e in order]
        ).contiguous()
        out[base + "down_proj"] = torch.stack([by_index[e]["down_proj"] for e in order])
    return out


RELEASED_QWEN3_5 = (
    ReleaseSpec(
        key="qwen3_5-0.8b",
        release="Qwen/Qwen3.5-0.8B",
        tiny=QWEN3_5,
        config_json=lambda s, vocab: release_config(s, vocab, moe=False),
        adjust_weights=with_mtp,
    ),
)
RELEASED_QWEN3_5_MOE = (
    ReleaseSpec(
        key="qwen3_6-35b-a3b",
        release="Qwen/Qwen3.6-35B-A3B",
        tiny=QWEN3_5_MOE,
        config_json=lambda s, vocab: release_config(s, vocab, moe=True),
        adjust_weights=with_mtp,
    ),
    ReleaseSpec(
        key="qwen3_6-35b-a3b-fused",
        release="Qwen/Qwen3.6-35B-A3B, experts fused as transformers 5 holds them",
        tiny=QWEN3_5_MOE,
        config_json=lambda s, vocab: release_config(s, vocab, moe=True),
        adjust_weights=lambda w: fused_experts(with_mtp(w)),
    ),
)
