"""Tiny Gemma 3 and Gemma 4 checkpoints: the family's real tokens, template and settings."""

from __future__ import annotations

from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec, released_template
from mmforge.backend.tiny.sizes import TEXT, VISION

_GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"]
_GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "<start_of_turn>{{ role }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ IMAGE }}"
    "{% elif part['type'] == 'audio' %}{{ AUDIO }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def _gemma3_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Gemma3Config

    text = {
        **TEXT,
        "vocab_size": vocab,
        "query_pre_attn_scalar": 16,
        # Shorter than an image prompt (256 soft tokens), so tests cross the window.
        "sliding_window": 32,
        "layer_types": ["sliding_attention", "full_attention"],
        "bos_token_id": s["<bos>"],
        "eos_token_id": [s["<eos>"], s["<end_of_turn>"]],
        "pad_token_id": s["<pad>"],
    }
    vision = {
        **VISION,
        "image_size": 64,
        "patch_size": 4,
    }
    return Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=256,
        boi_token_index=s["<start_of_image>"],
        eoi_token_index=s["<end_of_image>"],
        image_token_index=s["<image_soft_token>"],
    )


GEMMA3 = TinySpec(
    family_key="gemma3",
    hf_class="Gemma3ForConditionalGeneration",
    specials=[
        *_GEMMA_SPECIALS,
        "<start_of_image>",
        "<end_of_image>",
        "<image_soft_token>",
    ],
    make_config=_gemma3_config,
    chat_template=_GEMMA_TEMPLATE.replace("{{ IMAGE }}", "<start_of_image>").replace(
        "{{ AUDIO }}", ""
    ),
    tokenizer_extra={
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
        "image_token": "<image_soft_token>",
    },
    preprocessor={
        "image_processor_type": "Gemma3ImageProcessor",
        "do_convert_rgb": None,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "do_pan_and_scan": None,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "resample": 2,
        "rescale_factor": 1 / 255,
        "size": {"height": 64, "width": 64},
    },
    eos_tokens=["<end_of_turn>", "<eos>"],
    embed_std=0.005,
    logit_gain=10.0,
)


def _gemma4_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Gemma4Config

    text = {
        **TEXT,
        "vocab_size": vocab,
        "vocab_size_per_layer_input": vocab,
        "hidden_size_per_layer_input": 16,
        "global_head_dim": 32,
        "sliding_window": 64,
        "layer_types": ["sliding_attention", "full_attention"],
        "bos_token_id": s["<bos>"],
        "eos_token_id": [s["<eos>"], s["<end_of_turn>"]],
        "pad_token_id": s["<pad>"],
    }
    vision = {
        **VISION,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "patch_size": 16,
        "pooling_kernel_size": 3,
        "position_embedding_size": 1024,
    }
    audio = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,  # as released Gemma 4 (mobius 0.1 assumes 8)
        "subsampling_conv_channels": [128, 8],  # HF ties channel 0 to the 128 mel bins
        "conv_kernel_size": 5,
        "attention_chunk_size": 12,
        "attention_context_left": 13,
        "attention_context_right": 0,
        "output_proj_dims": 48,
        "use_clipped_linears": True,
    }
    return Gemma4Config(
        text_config=text,
        vision_config=vision,
        audio_config=audio,
        boi_token_id=s["<|image>"],
        eoi_token_id=s["<image|>"],
        image_token_id=s["<|image|>"],
        boa_token_id=s["<|audio>"],
        eoa_token_index=s["<audio|>"],
        audio_token_id=s["<|audio|>"],
        video_token_id=s["<|video|>"],
    )


GEMMA4 = TinySpec(
    family_key="gemma4",
    hf_class="Gemma4ForConditionalGeneration",
    specials=[
        *_GEMMA_SPECIALS,
        "<|image>",
        "<|image|>",
        "<image|>",
        "<|audio>",
        "<|audio|>",
        "<audio|>",
        "<|video|>",
    ],
    make_config=_gemma4_config,
    chat_template=_GEMMA_TEMPLATE.replace("{{ IMAGE }}", "<|image|>").replace(
        "{{ AUDIO }}", "<|audio|>"
    ),
    tokenizer_extra={
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "boi_token": "<|image>",
        "eoi_token": "<image|>",
        "image_token": "<|image|>",
        "boa_token": "<|audio>",
        "eoa_token": "<audio|>",
        "audio_token": "<|audio|>",
    },
    preprocessor={
        "image_processor_type": "Gemma4ImageProcessor",
        "do_convert_rgb": True,
        "do_normalize": False,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": [0.0, 0.0, 0.0],
        "image_std": [1.0, 1.0, 1.0],
        "max_soft_tokens": 70,
        "patch_size": 16,
        "pooling_kernel_size": 3,
        "resample": 3,
        "rescale_factor": 1 / 255,
    },
    audio_preprocessor={
        "feature_extractor_type": "Gemma4AudioFeatureExtractor",
        "feature_size": 128,
        "sampling_rate": 16000,
        "padding_value": 0.0,
        "padding_side": "right",
        "return_attention_mask": True,
        "frame_length": 320,
        "hop_length": 160,
        "fft_length": 512,
        "min_frequency": 0.0,
        "max_frequency": 8000.0,
        "mel_floor": 0.001,
    },
    eos_tokens=["<end_of_turn>", "<eos>"],
    embed_std=0.02,
    logit_gain=10.0,
)


def _gemma3_4b_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """google/gemma-3-4b-it's config.json (transformers 4.50), shrunk.

    The text config names only what differs from Gemma3TextConfig's defaults (its width,
    depth, linear RoPE scaling of the global layers and window), so the heads, head
    size, query_pre_attn_scalar (256), both RoPE thetas and the 5-local-to-1-global
    pattern come from the defaults; shrunk to 6 layers of width 64, keeping the pattern,
    and the head sizes it must name to shrink.
    """
    return {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "boi_token_index": s["<start_of_image>"],
        "eoi_token_index": s["<end_of_image>"],
        "eos_token_id": [s["<eos>"], s["<end_of_turn>"]],
        "image_token_index": s["<image_soft_token>"],
        "initializer_range": 0.02,
        "mm_tokens_per_image": 256,
        "model_type": "gemma3",
        "text_config": {
            "head_dim": 16,
            "hidden_size": 64,
            "intermediate_size": 128,
            "model_type": "gemma3_text",
            "num_attention_heads": 4,
            "num_hidden_layers": 6,
            "num_key_value_heads": 2,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 32,
            "vocab_size": vocab,
        },
        "torch_dtype": "bfloat16",
        "transformers_version": "4.50.0.dev0",
        "vision_config": {
            "hidden_size": 32,
            "image_size": 64,
            "intermediate_size": 64,
            "model_type": "siglip_vision_model",
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "patch_size": 4,
            "vision_use_head": False,
        },
    }


def _gemma3_names(name: str) -> str:
    """The release nests the SigLIP tower one level deeper than transformers 5 writes."""
    if name.startswith("vision_tower.") and not name.startswith("vision_tower.vision_model."):
        return "vision_tower.vision_model." + name[len("vision_tower.") :]
    return name


RELEASED_GEMMA3 = (
    ReleaseSpec(
        key="gemma3-4b",
        release="google/gemma-3-4b-it",
        tiny=GEMMA3,
        config_json=_gemma3_4b_release,
        rename=_gemma3_names,
        # The template google/gemma-3-4b-it ships (tokenizer_config.json).
        chat_template=released_template("gemma3"),
    ),
)


def _gemma4_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """A Gemma 4 config.json as its releases are laid out (transformers 5 key names).

    The towers and the text model name only what differs from transformers' defaults, so
    the activations, epsilons and both layer kinds' RoPE come from the defaults; the
    text model keeps runs of local layers closed by a global one, its last layers
    reusing earlier layers' KV caches, and the final logit soft-cap of 30; shrunk to 6
    layers (2 local to 1 global), the last 2 sharing KV. The released text was not at
    hand here: the layout follows transformers 5's Gemma 4 classes.
    """
    layer_types = ["sliding_attention", "sliding_attention", "full_attention"] * 2
    return {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "audio_config": {
            "attention_chunk_size": 12,
            "attention_context_left": 13,
            "attention_context_right": 0,
            "conv_kernel_size": 5,
            "hidden_size": 32,
            "model_type": "gemma4_audio",
            "num_attention_heads": 8,
            "num_hidden_layers": 2,
            "output_proj_dims": 48,
            "subsampling_conv_channels": [128, 8],
            "use_clipped_linears": True,
        },
        "audio_token_id": s["<|audio|>"],
        "boa_token_id": s["<|audio>"],
        "boi_token_id": s["<|image>"],
        "dtype": "bfloat16",
        "eoa_token_index": s["<audio|>"],
        "eoi_token_id": s["<image|>"],
        "eos_token_id": [s["<eos>"], s["<end_of_turn>"]],
        "image_token_id": s["<|image|>"],
        "model_type": "gemma4",
        "text_config": {
            "bos_token_id": s["<bos>"],
            "eos_token_id": [s["<eos>"], s["<end_of_turn>"]],
            "final_logit_softcapping": 30.0,
            "global_head_dim": 32,
            "head_dim": 16,
            "hidden_size": 64,
            "hidden_size_per_layer_input": 16,
            "intermediate_size": 128,
            "layer_types": layer_types,
            "model_type": "gemma4_text",
            "num_attention_heads": 4,
            "num_hidden_layers": 6,
            "num_key_value_heads": 2,
            "num_kv_shared_layers": 2,
            "pad_token_id": s["<pad>"],
            "sliding_window": 64,
            "vocab_size": vocab,
            "vocab_size_per_layer_input": vocab,
        },
        "transformers_version": "5.0.0",
        "video_token_id": s["<|video|>"],
        "vision_config": {
            "head_dim": 16,
            "hidden_size": 32,
            "intermediate_size": 64,
            "model_type": "gemma4_vision",
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "num_key_value_heads": 2,
            "patch_size": 16,
            "pooling_kernel_size": 3,
            "position_embedding_size": 1024,
        },
    }


RELEASED_GEMMA4 = (
    ReleaseSpec(
        key="gemma4",
        release="google/gemma-4 (layout)",
        tiny=GEMMA4,
        config_json=_gemma4_release,
        # Google's Gemma 4 template, the later of two revisions found (README).
        chat_template=released_template("gemma4"),
    ),
)
