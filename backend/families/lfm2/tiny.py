"""A tiny LFM2-VL checkpoint: the family's real tokens, template and settings."""

from __future__ import annotations

from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec, released_template
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


def _lfm2_vl_450m_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """LiquidAI/LFM2-VL-450M's config.json (transformers 4.57), shrunk.

    The processor's settings repeated at the top, a text config in LFM2's own keys
    (`full_attn_idxs` instead of layer_types, `block_auto_adjust_ff_dim` deriving the
    MLP width from block_ff_dim, `rope_theta`), 16 layers with attention at 2, 5, 8, 10,
    12 and 14; shrunk to 6 layers with attention at 2 and 5.
    """
    return {
        "architectures": ["Lfm2VlForConditionalGeneration"],
        "do_image_splitting": True,
        "downsample_factor": 2,
        "dtype": "bfloat16",
        "encoder_patch_size": 16,
        "image_token_id": s["<image>"],
        "max_image_tokens": 16,
        "max_num_patches": 1024,
        "max_pixels_tolerance": 2.0,
        "max_tiles": 10,
        "min_image_tokens": 4,
        "min_tiles": 2,
        "model_type": "lfm2_vl",
        "projector_bias": True,
        "projector_hidden_act": "gelu",
        "projector_hidden_size": 160,
        "text_config": {
            "architectures": ["Lfm2ForCausalLM"],
            "block_auto_adjust_ff_dim": True,
            "block_dim": 64,
            "block_ff_dim": 192,
            "block_ffn_dim_multiplier": 1.0,
            "block_mlp_init_scale": 1.0,
            "block_multiple_of": 256,
            "block_norm_eps": 1e-05,
            "block_out_init_scale": 1.0,
            "block_use_swiglu": True,
            "block_use_xavier_init": True,
            "bos_token_id": s["<|startoftext|>"],
            "conv_L_cache": 3,
            "conv_bias": False,
            "conv_dim": 64,
            "conv_dim_out": 64,
            "conv_use_xavier_init": True,
            "eos_token_id": s["<|im_end|>"],
            "full_attn_idxs": [2, 5],
            "hidden_size": 64,
            "initializer_range": 0.02,
            "intermediate_size": 192,
            "max_position_embeddings": 128000,
            "model_type": "lfm2",
            "norm_eps": 1e-05,
            "num_attention_heads": 4,
            "num_heads": 4,
            "num_hidden_layers": 6,
            "num_key_value_heads": 2,
            "pad_token_id": s["<|pad|>"],
            "rope_theta": 1000000.0,
            "use_cache": True,
            "use_pos_enc": True,
            "vocab_size": vocab,
        },
        "transformers_version": "4.57.0.dev0",
        "use_image_special_tokens": True,
        "use_thumbnail": True,
        "vision_config": {
            "attention_dropout": 0.0,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": 32,
            "intermediate_size": 64,
            "layer_norm_eps": 1e-06,
            "model_type": "siglip2_vision_model",
            "num_attention_heads": 2,
            "num_channels": 3,
            "num_hidden_layers": 2,
            "num_patches": 64,
            "patch_size": 16,
            "vision_use_head": False,
        },
    }


RELEASED_LFM2_VL = (
    ReleaseSpec(
        key="lfm2_vl-450m",
        release="LiquidAI/LFM2-VL-450M",
        tiny=LFM2_VL,
        config_json=_lfm2_vl_450m_release,
        seed=1,
        # LiquidAI/LFM2-VL-450M's chat_template.jinja as first released (the remote-code
        # revision, transformers 4.55), found in a copy of the release's files:
        # varun00391/local-finetuned-model, LiquidAI:LFM2-VL-450M/lfm2-450m/
        # chat_template.jinja at a913c33978b466ed686191eda666661a918ee9a3. Whether the
        # later native revision (whose config.json is above) changed it was not found.
        chat_template=released_template("lfm2_vl"),
    ),
)
