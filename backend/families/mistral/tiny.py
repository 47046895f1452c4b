"""A tiny Mistral 3 checkpoint: the family's real tokens, template and settings."""

from __future__ import annotations

from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec, released_template
from mmforge.backend.tiny.sizes import CLIP_MEAN, CLIP_STD, TEXT, VISION


def _mistral3_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Mistral3Config

    text = {
        **TEXT,
        "vocab_size": vocab,
        "sliding_window": None,
        "bos_token_id": s["<s>"],
        "eos_token_id": s["</s>"],
        "tie_word_embeddings": False,
    }
    vision = {
        **VISION,
        "head_dim": 16,
        "image_size": 128,
        "patch_size": 8,
        "hidden_act": "silu",  # as in released Mistral 3 checkpoints
    }
    return Mistral3Config(
        text_config=text,
        vision_config=vision,
        image_token_index=s["[IMG]"],
        spatial_merge_size=2,
        multimodal_projector_bias=False,
        vision_feature_layer=-1,
        tie_word_embeddings=False,
    )


MISTRAL3 = TinySpec(
    family_key="mistral3",
    hf_class="Mistral3ForConditionalGeneration",
    specials=[
        "<unk>",
        "<s>",
        "</s>",
        "<pad>",
        "[INST]",
        "[/INST]",
        "[IMG]",
        "[IMG_BREAK]",
        "[IMG_END]",
    ],
    make_config=_mistral3_config,
    chat_template=(
        "{{ bos_token }}{% for message in messages %}"
        "{% if message['role'] == 'user' %}[INST]"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'image' %}[IMG]"
        "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
        "{% endfor %}{% endif %}[/INST]"
        "{% else %}{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
        "{% endfor %}{% endif %}{{ eos_token }}{% endif %}{% endfor %}"
    ),
    tokenizer_extra={
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
    },
    preprocessor={
        "image_processor_type": "PixtralImageProcessor",
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
        "patch_size": 8,
        "resample": 3,
        "rescale_factor": 1 / 255,
        "size": {"longest_edge": 128},
    },
    eos_tokens=["</s>"],
)


def _pixtral_tower() -> dict[str, Any]:
    """The released Pixtral tower's config (1024 wide, 24 layers, 1540 px), shrunk."""
    return {
        "attention_dropout": 0.0,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": 32,
        "image_size": 128,
        "initializer_range": 0.02,
        "intermediate_size": 64,
        "model_type": "pixtral",
        "num_attention_heads": 2,
        "num_channels": 3,
        "num_hidden_layers": 2,
        "patch_size": 8,
        "rope_theta": 10000.0,
    }


def _mistral_small_3_1_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """mistralai/Mistral-Small-3.1-24B-Instruct-2503's config.json (transformers 4.50).

    A `mistral` text model with `rope_theta` 1e9, and no tie_word_embeddings, whose
    default (true) the checkpoint overrides with an lm_head of its own; shrunk.
    """
    return {
        "architectures": ["Mistral3ForConditionalGeneration"],
        "image_token_index": s["[IMG]"],
        "model_type": "mistral3",
        "multimodal_projector_bias": False,
        "projector_hidden_act": "gelu",
        "spatial_merge_size": 2,
        "text_config": {
            "attention_dropout": 0.0,
            "head_dim": 16,
            "hidden_act": "silu",
            "hidden_size": 64,
            "initializer_range": 0.02,
            "intermediate_size": 128,
            "max_position_embeddings": 131072,
            "model_type": "mistral",
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-05,
            "rope_theta": 1000000000.0,
            "sliding_window": None,
            "use_cache": True,
            "vocab_size": vocab,
        },
        "torch_dtype": "bfloat16",
        "transformers_version": "4.50.0.dev0",
        "vision_config": _pixtral_tower(),
        "vision_feature_layer": -1,
    }


def _ministral_3_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """mistralai/Ministral-3-3B-Instruct-2512's config.json.

    A `ministral3` text model with YaRN RoPE (factor 16 over 16,384 original positions)
    and Llama 4 attention scaling, tied embeddings; shrunk in width and depth, RoPE
    kept.
    """
    return {
        "architectures": ["Mistral3ForConditionalGeneration"],
        "dtype": "bfloat16",
        "image_token_index": s["[IMG]"],
        "model_type": "mistral3",
        "multimodal_projector_bias": False,
        "projector_hidden_act": "gelu",
        "spatial_merge_size": 2,
        "text_config": {
            "attention_dropout": 0.0,
            "head_dim": 16,
            "hidden_act": "silu",
            "hidden_size": 64,
            "initializer_range": 0.02,
            "intermediate_size": 128,
            "max_position_embeddings": 262144,
            "model_type": "ministral3",
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-05,
            "rope_parameters": {
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "factor": 16.0,
                "llama_4_scaling_beta": 0.1,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "original_max_position_embeddings": 16384,
                "rope_theta": 1000000.0,
                "rope_type": "yarn",
                "type": "yarn",
            },
            "sliding_window": None,
            "tie_word_embeddings": True,
            "use_cache": True,
            "vocab_size": vocab,
        },
        "tie_word_embeddings": True,
        "transformers_version": "5.0.0.dev0",
        "vision_config": _pixtral_tower(),
        "vision_feature_layer": -1,
    }


RELEASED_MISTRAL3 = (
    ReleaseSpec(
        key="mistral3-small-3.1",
        release="mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        tiny=MISTRAL3,
        config_json=_mistral_small_3_1_release,
        own_output_layer=True,
        # The text transformers' Mistral 3 processor test renders with the release's
        # processor (hf-internal-testing/Mistral-Small-3.1-24B-Instruct-2503-only-processor):
        # huggingface/transformers, tests/models/mistral3/test_processing_mistral3.py at
        # da8eb34b2a6dd74b77d3eea8bd910c1da2bca553, decoded from its string literal. The
        # release's own chat_template.json was not found to compare it with.
        chat_template=released_template("mistral3_small_3_1"),
    ),
    ReleaseSpec(
        key="ministral3-3b",
        release="mistralai/Ministral-3-3B-Instruct-2512",
        tiny=MISTRAL3,
        config_json=_ministral_3_release,
        # Ministral-3-14B-Instruct-2512's text (README): the 3B's own was not found.
        chat_template=released_template("ministral3"),
    ),
)
