"""Tiny and release-shaped InternVL 3 / 3.5 checkpoints (InternViT, Qwen2 or Qwen3 decoder)."""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec
from mmforge.backend.tiny.sizes import TEXT

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]

# The -hf releases' chat template, as transformers' InternVL converter
# (convert_internvl_weights_to_hf.py, found by stored-code search) writes it for
# InternVL3-1B-hf and InternVL3_5-1B-HF: ChatML, each picture as "<IMG_CONTEXT>\n" (which
# InternVLProcessor expands to <img>, 256 <IMG_CONTEXT> per view, </img>), no system
# prompt of its own, no BOS.
RELEASE_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n'}}"
    "{% if message['content'] is string %}"
    "{{ message['content'] }}"
    "{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}"
    "{{ '<IMG_CONTEXT>\\n' }}"
    "{% elif content['type'] == 'video' %}"
    "{{ '<video>\\n' }}"
    "{% elif content['type'] == 'text' %}"
    "{{ content['text'] }}"
    "{% endif %}"
    "{% endfor %}"
    "{% endif %}"
    "{{'<|im_end|>\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{'<|im_start|>assistant\\n' }}"
    "{% endif %}"
)

# The releases' tokenizer is Qwen2.5-VL's with InternVL's tokens added after it, so it
# holds Qwen's <|vision_start|>, <|vision_end|> and <|image_pad|> on ids of their own
# (151652, 151653, 151655) before <img>, </img>, <IMG_CONTEXT> (151665-151667).
SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<img>",
    "</img>",
    "<IMG_CONTEXT>",
    "<video>",
]

# transformers' InternVLProcessor reads these tokenizer attributes (the converter writes
# them as extra_special_tokens).
_TOKENIZER_EXTRA: dict[str, Any] = {
    "eos_token": "<|im_end|>",
    "pad_token": "<|endoftext|>",
    "bos_token": None,
    "extra_special_tokens": {
        "start_image_token": "<img>",
        "end_image_token": "</img>",
        "context_image_token": "<IMG_CONTEXT>",
        "video_token": "<video>",
    },
}

# GotOcr2ImageProcessor as the releases ship it: 448 px views, bicubic, ImageNet mean/std,
# up to 12 tiles plus a thumbnail. The tiny tower keeps the 448 px picture (1024 patches
# of 14 px: the release's grid, no position interpolation).
_PREPROCESSOR: dict[str, Any] = {
    "crop_size": None,
    "crop_to_patches": True,
    "data_format": "channels_first",
    "default_to_square": True,
    "device": None,
    "do_center_crop": None,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": IMAGENET_MEAN,
    "image_processor_type": "GotOcr2ImageProcessorFast",
    "image_std": IMAGENET_STD,
    "input_data_format": None,
    "max_patches": 12,
    "min_patches": 1,
    "processor_class": "InternVLProcessor",
    "resample": 3,
    "rescale_factor": 1 / 255,
    "return_tensors": None,
    "size": {"height": 448, "width": 448},
}

_VISION: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "image_size": [448, 448],
    "patch_size": [14, 14],
    "attention_bias": True,
    "use_qk_norm": False,
    "norm_type": "layer_norm",
    "layer_norm_eps": 1e-6,
    "hidden_act": "gelu",
    "layer_scale_init_value": 0.1,
    "use_mean_pooling": True,
}


def _text(s: dict[str, int], vocab: int, model_type: str) -> dict[str, Any]:
    return {
        **TEXT,
        "model_type": model_type,
        "vocab_size": vocab,
        "hidden_act": "silu",
        "bos_token_id": s["<|endoftext|>"],
        "eos_token_id": s["<|im_end|>"],
        "pad_token_id": s["<|endoftext|>"],
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "tie_word_embeddings": False,
        # Tiled pictures are long: the probe picture alone is 13 views (3,328 ids); the
        # releases hold 32,768 positions.
        "max_position_embeddings": 16384,
        **({"attention_bias": False} if model_type == "qwen3" else {}),
    }


def _config(model_type: str) -> Any:
    def make(s: dict[str, int], vocab: int) -> Any:
        from transformers import InternVLConfig

        return InternVLConfig(
            text_config=_text(s, vocab, model_type),
            vision_config=dict(_VISION),
            image_token_id=s["<IMG_CONTEXT>"],
            image_seq_length=256,
            downsample_ratio=0.5,
            projector_hidden_act="gelu",
            vision_feature_layer=-1,
            vision_feature_select_strategy="default",
            tie_word_embeddings=False,
        )

    return make


INTERNVL = TinySpec(
    family_key="internvl",
    hf_class="InternVLForConditionalGeneration",
    specials=SPECIALS,
    make_config=_config("qwen2"),
    chat_template=RELEASE_TEMPLATE,
    tokenizer_extra=_TOKENIZER_EXTRA,
    preprocessor=_PREPROCESSOR,
    eos_tokens=["<|im_end|>"],
    # The probe picture (13 views: 4 × 3 tiles and the thumbnail) as InternVLProcessor
    # tiles it, transformers' greedy answer: distinct tokens in 32, then in a second turn's
    # 16: seed 0: 2, 2; 1: 2, 2; 2: 5, 5; 3: 9, 2; 4: 4, 2; 5: 7, 7.
    seed=5,
)


def _vision_json(**extra: Any) -> dict[str, Any]:
    return {
        "architectures": ["InternVisionModel"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "dropout": 0.0,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "hidden_size": 32,
        "image_size": [448, 448],
        "initializer_factor": 0.1,
        "initializer_range": 1e-10,
        "intermediate_size": 64,
        "layer_norm_eps": 1e-06,
        "layer_scale_init_value": 0.1,
        "model_type": "internvl_vision",
        "norm_type": "layer_norm",
        "num_attention_heads": 2,
        "num_channels": 3,
        "num_hidden_layers": 2,
        "patch_size": [14, 14],
        "projection_dropout": 0.0,
        "torch_dtype": "bfloat16",
        "use_absolute_position_embeddings": True,
        "use_mask_token": False,
        "use_mean_pooling": True,
        "use_qk_norm": False,
        **extra,
    }


def _release(text_type: str, architecture: str, version: str) -> Any:
    def config_json(s: dict[str, int], vocab: int) -> dict[str, Any]:
        text: dict[str, Any] = {
            "architectures": [architecture],
            "attention_dropout": 0.0,
            "bos_token_id": s["<|endoftext|>"],
            "eos_token_id": s["<|im_end|>"],
            "hidden_act": "silu",
            "hidden_size": 64,
            "initializer_range": 0.02,
            "intermediate_size": 128,
            "max_position_embeddings": 32768,
            "max_window_layers": 70,
            "model_type": text_type,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-06,
            "rope_scaling": None,
            "rope_theta": 1000000.0,
            "sliding_window": None,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_cache": True,
            "use_sliding_window": False,
            "vocab_size": vocab,
        }
        if text_type == "qwen3":
            text.update({"head_dim": 16, "attention_bias": False})
        return {
            "architectures": ["InternVLForConditionalGeneration"],
            "downsample_ratio": 0.5,
            "image_seq_length": 256,
            "image_token_id": s["<IMG_CONTEXT>"],
            "model_type": "internvl",
            "projector_hidden_act": "gelu",
            "text_config": text,
            "torch_dtype": "bfloat16",
            "transformers_version": version,
            "vision_config": _vision_json(),
            "vision_feature_layer": -1,
            "vision_feature_select_strategy": "default",
            "tie_word_embeddings": False,
        }

    return config_json


def _release_names(name: str) -> str:
    """The releases' tensor names (transformers 4.52's converter): `model.*` and `lm_head.*`.

    transformers 5 saves its legacy names (`language_model.model.*`, `vision_tower.*`);
    its state dict has the releases' own.
    """
    for saved, released in (
        ("language_model.model.", "model.language_model."),
        ("language_model.lm_head.", "lm_head."),
        ("vision_tower.", "model.vision_tower."),
        ("multi_modal_projector.", "model.multi_modal_projector."),
    ):
        if name.startswith(saved):
            return released + name[len(saved) :]
    return name


# Reconstructed, not copied: the hub is not reachable here and no stored copy of either
# release's config.json was found. The shape follows what transformers' InternVL converter
# (convert_internvl_weights_to_hf.py) writes: InternVLConfig with the original remote-code
# model's llm_config as text_config (Qwen2ForCausalLM for InternVL3-1B, Qwen3ForCausalLM
# for InternVL3.5-1B, transformers 4 rope keys at the top of text_config), the
# InternViT-300M vision_config (448 px, 14 px patches, attention_bias, layer norms, layer
# scale 0.1, mean pooling), image_token_id at <IMG_CONTEXT>, bf16, weights under
# transformers' names (model.vision_tower.*, model.multi_modal_projector.*,
# model.language_model.*, lm_head.*), an lm_head of its own (tie_word_embeddings false).
# Widths, depths and the vocabulary are shrunk; token ids ours.
RELEASED_INTERNVL = (
    ReleaseSpec(
        key="internvl3-1b",
        release="OpenGVLab/InternVL3-1B-hf",
        tiny=INTERNVL,
        config_json=_release("qwen2", "Qwen2ForCausalLM", "4.52.0.dev0"),
        rename=_release_names,
        preprocessor=_PREPROCESSOR,
        chat_template=RELEASE_TEMPLATE,
        seed=1,  # 15 distinct tokens in 32 greedy ones (seed 0: one token repeated)
    ),
    ReleaseSpec(
        key="internvl3_5-1b",
        release="OpenGVLab/InternVL3_5-1B-HF",
        tiny=dataclasses.replace(INTERNVL, make_config=_config("qwen3")),
        config_json=_release("qwen3", "Qwen3ForCausalLM", "4.56.0.dev0"),
        rename=_release_names,
        preprocessor=_PREPROCESSOR,
        chat_template=RELEASE_TEMPLATE,
        seed=2,  # 9 distinct tokens in 32 greedy ones (seed 0: one token repeated)
    ),
)
