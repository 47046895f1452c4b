"""Tiny Qwen2.5-VL and Qwen3-VL checkpoints: the family's real tokens, template and settings."""

from __future__ import annotations

from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec, released_template
from mmforge.backend.tiny.sizes import CLIP_MEAN, CLIP_STD, TEXT

# Chat templates are our own, written to match each family's conventions: the role
# markers, the BOS the runtime never adds by itself, and the exact placeholder strings the
# runtime's processor expands.
QWEN_TOKENIZER = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}
_QWEN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]


def qwen_ids(s: dict[str, int]) -> dict[str, int]:
    """The vision token ids of a Qwen config, from the special tokens' ids."""
    return {
        "image_token_id": s["<|image_pad|>"],
        "video_token_id": s["<|video_pad|>"],
        "vision_start_token_id": s["<|vision_start|>"],
        "vision_end_token_id": s["<|vision_end|>"],
    }


def _qwen2_5_vl_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Qwen2_5_VLConfig

    text = {
        **TEXT,
        "vocab_size": vocab,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [2, 3, 3],
        },
        "bos_token_id": s["<|endoftext|>"],
        "eos_token_id": s["<|im_end|>"],
        "tie_word_embeddings": False,
    }
    text.pop("head_dim")  # Qwen2 derives it: 64 / 4 heads = 16
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 56,
        "out_hidden_size": TEXT["hidden_size"],
        "fullatt_block_indexes": [1],
        "tokens_per_second": 2,
    }
    return Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=False, **qwen_ids(s)
    )


QWEN2_5_VL = TinySpec(
    family_key="qwen2_5_vl",
    hf_class="Qwen2_5_VLForConditionalGeneration",
    specials=QWEN_SPECIALS,
    make_config=_qwen2_5_vl_config,
    chat_template=_QWEN_TEMPLATE,
    tokenizer_extra=QWEN_TOKENIZER,
    preprocessor={
        "image_processor_type": "Qwen2VLImageProcessor",
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
        "merge_size": 2,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "resample": 3,
        "rescale_factor": 1 / 255,
        "min_pixels": 28 * 28 * 4,
        "max_pixels": 28 * 28 * 64,
        "size": {"shortest_edge": 28 * 28 * 4, "longest_edge": 28 * 28 * 64},
    },
    eos_tokens=["<|im_end|>", "<|endoftext|>"],
)


def qwen3_vl_parts(s: dict[str, int], vocab: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tiny Qwen3-VL's text and vision config dicts (Qwen3-VL MoE's start from them)."""
    text = {
        **TEXT,
        "vocab_size": vocab,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [2, 3, 3],
            "mrope_interleaved": True,
        },
        "bos_token_id": s["<|endoftext|>"],
        "eos_token_id": s["<|im_end|>"],
        "tie_word_embeddings": False,
    }
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": TEXT["hidden_size"],
        "num_position_embeddings": 64,
        "deepstack_visual_indexes": [0, 1],
    }
    return text, vision


def _qwen3_vl_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Qwen3VLConfig

    text, vision = qwen3_vl_parts(s, vocab)
    return Qwen3VLConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=False, **qwen_ids(s)
    )


QWEN3_VL = TinySpec(
    family_key="qwen3_vl",
    hf_class="Qwen3VLForConditionalGeneration",
    specials=QWEN_SPECIALS,
    make_config=_qwen3_vl_config,
    chat_template=_QWEN_TEMPLATE,
    tokenizer_extra=QWEN_TOKENIZER,
    preprocessor={
        **QWEN2_5_VL.preprocessor,  # type: ignore[dict-item]
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "patch_size": 16,
        "min_pixels": 32 * 32 * 4,
        "max_pixels": 32 * 32 * 64,
        "size": {"shortest_edge": 32 * 32 * 4, "longest_edge": 32 * 32 * 64},
    },
    eos_tokens=["<|im_end|>", "<|endoftext|>"],
)


# Qwen2.5-VL-3B-Instruct's sizes, and the test checkpoint's: width, depth and heads
# shrunk, the window/full-attention pattern kept (full every 8th block there, every 2nd
# here). The benchmark at the released scale builds from RELEASED_3B.
RELEASED_3B = {
    "hidden": 2048, "intermediate": 11008, "layers": 36, "heads": 16, "kv_heads": 2,
    "vision_depth": 32, "vision_hidden": 1280, "vision_intermediate": 3420,
    "vision_heads": 16, "full_blocks": [7, 15, 23, 31], "mrope": [16, 24, 24],
}  # fmt: skip
SHRUNK_3B = {
    "hidden": 64, "intermediate": 128, "layers": 2, "heads": 4, "kv_heads": 2,
    "vision_depth": 4, "vision_hidden": 32, "vision_intermediate": 64,
    "vision_heads": 2, "full_blocks": [1, 3], "mrope": [2, 3, 3],
}  # fmt: skip


def qwen2_5_vl_3b_release(
    s: dict[str, int], vocab: int, sizes: dict[str, Any] = SHRUNK_3B
) -> dict[str, Any]:
    """Qwen/Qwen2.5-VL-3B-Instruct's config.json.

    The flat transformers 4.41 layout (text fields at the top), `rope_scaling` with
    `type: mrope` and a top-level `rope_theta`, tied embeddings; 36 layers and a
    32-block tower with full attention every 8th block, shrunk to 2 layers and 4 blocks
    with full attention every 2nd.
    """
    return {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "attention_dropout": 0.0,
        "bos_token_id": s["<|endoftext|>"],
        "eos_token_id": s["<|im_end|>"],
        "vision_start_token_id": s["<|vision_start|>"],
        "vision_end_token_id": s["<|vision_end|>"],
        "image_token_id": s["<|image_pad|>"],
        "video_token_id": s["<|video_pad|>"],
        "hidden_act": "silu",
        "hidden_size": sizes["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": sizes["intermediate"],
        "max_position_embeddings": 128000,
        "max_window_layers": 70,
        "model_type": "qwen2_5_vl",
        "num_attention_heads": sizes["heads"],
        "num_hidden_layers": sizes["layers"],
        "num_key_value_heads": sizes["kv_heads"],
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.41.2",
        "use_cache": True,
        "use_sliding_window": False,
        "vision_config": {
            "depth": sizes["vision_depth"],
            "hidden_act": "silu",
            "hidden_size": sizes["vision_hidden"],
            "intermediate_size": sizes["vision_intermediate"],
            "num_heads": sizes["vision_heads"],
            "in_chans": 3,
            "out_hidden_size": sizes["hidden"],
            "patch_size": 14,
            "spatial_merge_size": 2,
            "spatial_patch_size": 14,
            "window_size": 112,
            "fullatt_block_indexes": sizes["full_blocks"],
            "tokens_per_second": 2,
            "temporal_patch_size": 2,
        },
        "rope_scaling": {"type": "mrope", "mrope_section": sizes["mrope"]},
        "vocab_size": vocab,
    }


def _qwen3_vl_2b_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """Qwen/Qwen3-VL-2B-Instruct's config.json.

    transformers 4.57's nested layout with `rope_scaling` (interleaved M-RoPE) and
    `rope_theta` 5e6 inside text_config, tied embeddings, a 24-block tower with
    DeepStack taps at blocks 5, 11 and 17 feeding the first 3 of 28 layers; shrunk to 4
    layers and a 4-block tower tapped at 0, 1 and 2.
    """
    return {
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "image_token_id": s["<|image_pad|>"],
        "model_type": "qwen3_vl",
        "text_config": {
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": s["<|endoftext|>"],
            "dtype": "bfloat16",
            "eos_token_id": s["<|im_end|>"],
            "head_dim": 16,
            "hidden_act": "silu",
            "hidden_size": 64,
            "initializer_range": 0.02,
            "intermediate_size": 192,
            "max_position_embeddings": 262144,
            "model_type": "qwen3_vl_text",
            "num_attention_heads": 4,
            "num_hidden_layers": 4,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-06,
            "rope_scaling": {
                "mrope_interleaved": True,
                "mrope_section": [4, 2, 2],
                "rope_type": "default",
            },
            "rope_theta": 5000000,
            "tie_word_embeddings": True,
            "use_cache": True,
            "vocab_size": vocab,
        },
        "tie_word_embeddings": True,
        "transformers_version": "4.57.0.dev0",
        "video_token_id": s["<|video_pad|>"],
        "vision_config": {
            "deepstack_visual_indexes": [0, 1, 2],
            "depth": 4,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": 32,
            "in_channels": 3,
            "initializer_range": 0.02,
            "intermediate_size": 128,
            "model_type": "qwen3_vl",
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


RELEASED_QWEN2_5_VL = (
    ReleaseSpec(
        key="qwen2_5_vl-3b",
        release="Qwen/Qwen2.5-VL-3B-Instruct",
        tiny=QWEN2_5_VL,
        config_json=qwen2_5_vl_3b_release,
        chat_template=released_template("qwen2_5_vl"),
    ),
)
RELEASED_QWEN3_VL = (
    ReleaseSpec(
        key="qwen3_vl-2b",
        release="Qwen/Qwen3-VL-2B-Instruct",
        tiny=QWEN3_VL,
        config_json=_qwen3_vl_2b_release,
        chat_template=released_template("qwen3_vl"),
    ),
)
