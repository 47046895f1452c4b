"""Tiny Qwen2.5-VL and Qwen3-VL checkpoints: the family's real tokens, template and settings."""

from __future__ import annotations

from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.sizes import CLIP_MEAN, CLIP_STD, TEXT

# Chat templates are our own, written to match each family's conventions: the role
# markers, the BOS the runtime never adds by itself, and the exact placeholder strings the
# runtime's processor expands.
_QWEN_TOKENIZER = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}
_QWEN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]


def _qwen_ids(s: dict[str, int]) -> dict[str, int]:
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
        text_config=text, vision_config=vision, tie_word_embeddings=False, **_qwen_ids(s)
    )


QWEN2_5_VL = TinySpec(
    family_key="qwen2_5_vl",
    hf_class="Qwen2_5_VLForConditionalGeneration",
    specials=_QWEN_SPECIALS,
    make_config=_qwen2_5_vl_config,
    chat_template=_QWEN_TEMPLATE,
    tokenizer_extra=_QWEN_TOKENIZER,
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


def _qwen3_vl_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Qwen3VLConfig

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
    return Qwen3VLConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=False, **_qwen_ids(s)
    )


QWEN3_VL = TinySpec(
    family_key="qwen3_vl",
    hf_class="Qwen3VLForConditionalGeneration",
    specials=_QWEN_SPECIALS,
    make_config=_qwen3_vl_config,
    chat_template=_QWEN_TEMPLATE,
    tokenizer_extra=_QWEN_TOKENIZER,
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
