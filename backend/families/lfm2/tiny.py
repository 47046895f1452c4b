"""A tiny LFM2-VL checkpoint: the family's real tokens, template and settings."""

from __future__ import annotations

from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.sizes import VISION


def _lfm2_vl_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Lfm2VlConfig

    text = {
        "vocab_size": vocab,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "layer_types": ["conv", "full_attention"],
        "block_auto_adjust_ff_dim": False,
        "bos_token_id": s["<|startoftext|>"],
        "eos_token_id": s["<|im_end|>"],
        "pad_token_id": s["<|pad|>"],
        "tie_word_embeddings": True,
    }
    vision = {
        **VISION,
        "patch_size": 16,
        "num_patches": 64,
        "vision_use_head": False,
    }
    return Lfm2VlConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=s["<image>"],
        projector_hidden_size=64,
        downsample_factor=2,
        tie_word_embeddings=True,
    )


LFM2_VL = TinySpec(
    family_key="lfm2_vl",
    hf_class="Lfm2VlForConditionalGeneration",
    specials=[
        "<|pad|>",
        "<|startoftext|>",
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<image>",
        "<|image_start|>",
        "<|image_end|>",
        "<|img_thumbnail|>",
    ],
    make_config=_lfm2_vl_config,
    chat_template=(
        "{{ bos_token }}{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'image' %}<image>{% elif part['type'] == 'text' %}{{ part['text'] }}"
        "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    tokenizer_extra={
        "bos_token": "<|startoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|pad|>",
        "image_token": "<image>",
    },
    preprocessor={
        "image_processor_type": "Lfm2VlImageProcessor",
        "do_image_splitting": False,
        "downsample_factor": 2,
        "encoder_patch_size": 16,
        "min_image_tokens": 4,
        "max_image_tokens": 16,
        "max_pixels_tolerance": 2.0,
        "do_resize": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_pad": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "resample": 2,
        "rescale_factor": 1 / 255,
        "min_tiles": 2,
        "max_tiles": 10,
        "tile_size": 512,
        "use_thumbnail": True,
    },
    eos_tokens=["<|im_end|>"],
    embed_std=0.02,
)
