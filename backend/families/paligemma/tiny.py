"""A tiny PaliGemma checkpoint: the family's real tokens, prompt layout and settings."""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec
from mmforge.backend.tiny.sizes import TEXT, VISION

# PaliGemma's prompt is not a chat: transformers' PaliGemmaProcessor writes `<image>` per
# picture, then `<bos>`, the prefix and "\n" (processing_paligemma.py,
# prepare_inputs_layout). The released tokenizers carry no chat template (the
# release-shaped checkpoints below have none); the tiny one writes that layout for one
# user message, so that a checkpoint with a template of its own is tested too.
CHAT_TEMPLATE = (
    "{% if messages | length != 1 or messages[0]['role'] != 'user' %}"
    "{{ raise_exception('PaliGemma takes one user message: a picture and a prefix') }}"
    "{% endif %}"
    "{% set content = messages[0]['content'] %}"
    "{% if content is string %}{{ bos_token }}{{ content }}"
    "{% else %}{% for part in content %}{% if part['type'] == 'image' %}{{ IMAGE }}"
    "{% endif %}{% endfor %}{{ bos_token }}{% for part in content %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    # An expression, not a literal: Jinja drops a template's final newline
    # (keep_trailing_newline is off in transformers and in ORT GenAI).
    "{{ '\\n' }}"
)


def _paligemma_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import PaliGemmaConfig

    text = {
        **TEXT,
        "model_type": "gemma",
        "vocab_size": vocab,
        "hidden_activation": "gelu_pytorch_tanh",
        "bos_token_id": s["<bos>"],
        "eos_token_id": s["<eos>"],
        "pad_token_id": s["<pad>"],
    }
    vision = {**VISION, "image_size": 32, "patch_size": 4, "projection_dim": 64}
    return PaliGemmaConfig(
        text_config=text,
        vision_config=vision,
        image_token_index=s["<image>"],
        projection_dim=64,
        hidden_size=64,
        bos_token_id=s["<bos>"],
        eos_token_id=s["<eos>"],
        pad_token_id=s["<pad>"],
    )


_PREPROCESSOR: dict[str, Any] = {
    "image_processor_type": "SiglipImageProcessor",
    "processor_class": "PaliGemmaProcessor",
    "image_seq_length": 64,
    "do_convert_rgb": None,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "resample": 3,
    "rescale_factor": 1 / 255,
    "size": {"height": 32, "width": 32},
}
# The releases' 224 px: 256 ids per picture at patch 14.
_PREPROCESSOR_224 = {
    **_PREPROCESSOR,
    "image_seq_length": 256,
    "size": {"height": 224, "width": 224},
}

PALIGEMMA = TinySpec(
    family_key="paligemma",
    hf_class="PaliGemmaForConditionalGeneration",
    specials=["<pad>", "<eos>", "<bos>", "<image>"],
    make_config=_paligemma_config,
    chat_template=CHAT_TEMPLATE.replace("{{ IMAGE }}", "<image>"),
    tokenizer_extra={
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "add_bos_token": False,
    },
    preprocessor=_PREPROCESSOR,
    eos_tokens=["<eos>"],
    embed_std=0.005,
    logit_gain=10.0,
)


# The releases' tokenizer_config.json has no chat template, and leaves the BOS to the
# tokenizer (add_bos_token, which PaliGemmaProcessor turns off); it names the processor.
# Reconstructed from these documented facts, not copied from a release's file; the
# tokenizer itself stays the tiny's.
RELEASED_TOKENIZER = dataclasses.replace(
    PALIGEMMA,
    chat_template=None,
    tokenizer_extra={
        **PALIGEMMA.tokenizer_extra,
        "add_bos_token": True,
        "processor_class": "PaliGemmaProcessor",
    },
)


def _pt_224_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """google/paligemma-3b-pt-224's config.json (transformers 4.41), shrunk.

    The key set of the release's `text_config` and `vision_config` (with the values of the
    3B model) is spelled out in a pi0 test fixture in stored public code (find_string
    '"projection_dim": 2048', id 49679042083: `PaliGemmaConfig(bos_token_id=2,
    eos_token_id=1, hidden_size=2048, image_token_index=257152, model_type="paligemma",
    pad_token_id=0, projection_dim=2048, text_config={...}, vision_config={...})`); the
    top-level bookkeeping keys (`architectures`, `ignore_index`, `torch_dtype`,
    `transformers_version`, `vocab_size`) are reconstructed from what transformers 4.41
    wrote, not copied from the file. The release leaves `head_dim` (256), `image_size`
    (224), `rms_norm_eps`, `rope_theta` and `max_position_embeddings` to their defaults,
    and so does this one. Shrunk: width, depth, heads (one key/value head, as released)
    and the vocabulary; patch 14 at the default 224 px keeps 256 ids per picture.
    """
    return {
        "architectures": ["PaliGemmaForConditionalGeneration"],
        "bos_token_id": s["<bos>"],
        "eos_token_id": s["<eos>"],
        "hidden_size": 64,
        "ignore_index": -100,
        "image_token_index": s["<image>"],
        "model_type": "paligemma",
        "pad_token_id": s["<pad>"],
        "projection_dim": 64,
        "text_config": {
            "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 64,
            "intermediate_size": 128,
            "model_type": "gemma",
            "num_attention_heads": 4,
            "num_hidden_layers": 3,
            "num_image_tokens": 256,
            "num_key_value_heads": 1,
            "torch_dtype": "float32",
            "vocab_size": vocab,
        },
        "torch_dtype": "float32",
        "transformers_version": "4.41.0.dev0",
        "vision_config": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "model_type": "siglip_vision_model",
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "num_image_tokens": 256,
            "patch_size": 14,
            "projection_dim": 64,
            "projector_hidden_act": "gelu_fast",
            "torch_dtype": "float32",
            "vision_use_head": False,
        },
        "vocab_size": vocab,
    }


def _hub_names(name: str) -> str:
    """The hub's name: transformers 5 saves the SigLIP tower without `vision_model.`."""
    if name.startswith("vision_tower.") and not name.startswith("vision_tower.vision_model."):
        return "vision_tower.vision_model." + name[len("vision_tower.") :]
    return name


_PG1_RELEASE = ReleaseSpec(
    key="paligemma-3b-pt-224",
    release="google/paligemma-3b-pt-224",
    # The release ships no chat template (PaliGemma is not a chat model), and neither
    # does this one: the package's is derived from PaliGemmaProcessor's prompt format,
    # and verify's transformers side runs the processor itself.
    tiny=RELEASED_TOKENIZER,
    config_json=_pt_224_release,
    rename=_hub_names,
    preprocessor=_PREPROCESSOR_224,
)


def _pg2_3b_224_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """google/paligemma2-3b-pt-224's config.json (transformers 4.47), reconstructed, shrunk.

    No copy of the file was found in the stored code; the keys are reconstructed from
    documented facts: PaliGemma 2 is PaliGemma with a Gemma 2 decoder (`model_type`
    gemma2 in `text_config`, with `query_pre_attn_scalar` and `sliding_window` written,
    the soft-caps and the alternating layer pattern left to Gemma2Config's defaults), a
    `projection_dim` equal to the decoder width, and the 3B model's vision tower. Shrunk:
    width, depth (4 layers: sliding, full, sliding, full), heads, the vocabulary and the
    window (4096 → 32, so that decode steps cross it: a picture alone is 256 ids).
    """
    return {
        "architectures": ["PaliGemmaForConditionalGeneration"],
        "bos_token_id": s["<bos>"],
        "eos_token_id": s["<eos>"],
        "hidden_size": 64,
        "image_token_index": s["<image>"],
        "model_type": "paligemma",
        "num_hidden_layers": 4,
        "pad_token_id": s["<pad>"],
        "projection_dim": 64,
        "text_config": {
            "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 64,
            "intermediate_size": 128,
            "model_type": "gemma2",
            "num_attention_heads": 4,
            "num_hidden_layers": 4,
            "num_image_tokens": 256,
            "num_key_value_heads": 2,
            "query_pre_attn_scalar": 16,
            "sliding_window": 32,
            "torch_dtype": "bfloat16",
            "vocab_size": vocab,
        },
        "torch_dtype": "bfloat16",
        "transformers_version": "4.47.0.dev0",
        "vision_config": {
            "hidden_size": 32,
            "image_size": 224,
            "intermediate_size": 64,
            "model_type": "siglip_vision_model",
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "num_image_tokens": 256,
            "num_positions": 256,
            "patch_size": 14,
            "projection_dim": 64,
            "torch_dtype": "bfloat16",
            "vision_use_head": False,
        },
    }


RELEASED_PALIGEMMA = (
    _PG1_RELEASE,
    ReleaseSpec(
        key="paligemma2-3b-pt-224",
        release="google/paligemma2-3b-pt-224",
        tiny=RELEASED_TOKENIZER,
        config_json=_pg2_3b_224_release,
        rename=_hub_names,
        preprocessor=_PREPROCESSOR_224,
    ),
)
