"""Tiny and release-shaped LLaVA-1.5 checkpoints (CLIP tower, Llama decoder)."""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec
from mmforge.backend.tiny.sizes import CLIP_MEAN, CLIP_STD, TEXT, VISION

# llava-hf/llava-1.5-7b-hf's chat template (its chat_template.json): the role in capitals,
# each message's pictures first as "<image>\n", then its texts each followed by a space,
# "ASSISTANT:" to prompt. The tiny one writes the BOS itself (ORT GenAI 0.18 adds none);
# the release's leaves it to the tokenizer (add_bos_token), which the package's copy of
# the template then writes (families/llava/package.py).
_TEMPLATE_BODY = (
    "{% for message in messages %}"
    "{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}{% endif %}"
    "{# Render all images first #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\\n' }}{% endfor %}"
    "{# Render all text next #}"
    "{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + ' '}}{% endfor %}"
    "{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)
RELEASE_TEMPLATE = _TEMPLATE_BODY


def _vision(image_size: int, patch: int) -> dict[str, Any]:
    return {
        **VISION,
        "model_type": "clip_vision_model",
        "image_size": image_size,
        "patch_size": patch,
        "projection_dim": 32,
        "hidden_act": "quick_gelu",  # CLIP ViT-L/14-336's activation
        "layer_norm_eps": 1e-5,
    }


def _llava_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import LlavaConfig

    text = {
        **TEXT,
        "model_type": "llama",
        "vocab_size": vocab,
        "bos_token_id": s["<s>"],
        "eos_token_id": s["</s>"],
        "pad_token_id": s["<pad>"],
        "tie_word_embeddings": False,
    }
    return LlavaConfig(
        text_config=text,
        # 3 layers, so that layer -2 is not the first nor the last.
        vision_config={**_vision(56, 14), "num_hidden_layers": 3},
        image_token_index=s["<image>"],
        projector_hidden_act="gelu",
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        image_seq_length=16,
        tie_word_embeddings=False,
    )


LLAVA = TinySpec(
    family_key="llava",
    hf_class="LlavaForConditionalGeneration",
    specials=["<unk>", "<s>", "</s>", "<pad>", "<image>"],
    make_config=_llava_config,
    chat_template="{{ bos_token }}" + _TEMPLATE_BODY,
    tokenizer_extra={
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "add_bos_token": False,
    },
    # CLIPImageProcessor as llava-1.5 ships it, at the tiny tower's 56 px.
    preprocessor={
        "crop_size": {"height": 56, "width": 56},
        "do_center_crop": True,
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": CLIP_MEAN,
        "image_processor_type": "CLIPImageProcessor",
        "image_std": CLIP_STD,
        "processor_class": "LlavaProcessor",
        "resample": 3,
        "rescale_factor": 0.00392156862745098,
        "size": {"shortest_edge": 56},
    },
    eos_tokens=["</s>"],
)


def _llava_1_5_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """llava-hf/llava-1.5-7b-hf's config.json (transformers 4.36), shrunk.

    The text is the release's as stored-code search found it quoted in full (the
    lite_llama repository's test of its LlavaConfig; a transformers 4.41 log of
    loading llava-hf/llava-1.5-7b-hf prints the same fields): a partial `llama`
    text_config (Vicuna-7B's sizes come from LlamaConfig's defaults), the CLIP-L/14-336
    tower, `vision_feature_layer` -2, strategy `default`, image_token_index 32000, pad
    32001, a deprecated top-level vocab_size. Widths and depths are added shrunk (the
    release leaves the text sizes to the defaults, which are 7B); the 336 px picture
    and 14 px patches are kept (K = 576); vocabulary and token ids ours.
    """
    return {
        "architectures": ["LlavaForConditionalGeneration"],
        "ignore_index": -100,
        "image_token_index": s["<image>"],
        "model_type": "llava",
        "pad_token_id": s["<pad>"],
        "projector_hidden_act": "gelu",
        "text_config": {
            "_name_or_path": "lmsys/vicuna-7b-v1.5",
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 64,
            "intermediate_size": 128,
            "max_position_embeddings": 4096,
            "model_type": "llama",
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "num_key_value_heads": 4,
            "rms_norm_eps": 1e-05,
            "torch_dtype": "float16",
            "vocab_size": vocab,
        },
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "transformers_version": "4.36.0.dev0",
        "vision_config": {
            "hidden_size": 32,
            "image_size": 336,
            "intermediate_size": 64,
            "model_type": "clip_vision_model",
            "num_attention_heads": 2,
            "num_hidden_layers": 3,
            "patch_size": 14,
            "projection_dim": 32,
            "vocab_size": 32000,
        },
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "vocab_size": vocab,
    }


def _release_names(name: str) -> str:
    """Transformers 5's tensor names as the release has them (transformers 4.36)."""
    for new, old in (
        ("model.language_model.", "language_model.model."),
        ("model.vision_tower.", "vision_tower.vision_model."),
        ("model.multi_modal_projector.", "multi_modal_projector."),
        ("lm_head.", "language_model.lm_head."),
        ("language_model.model.", "language_model.model."),
        ("vision_tower.vision_model.", "vision_tower.vision_model."),
        ("vision_tower.", "vision_tower.vision_model."),
    ):
        if name.startswith(new):
            return old + name[len(new) :]
    return name


RELEASED_LLAVA = (
    ReleaseSpec(
        key="llava-1.5-7b",
        release="llava-hf/llava-1.5-7b-hf",
        tiny=dataclasses.replace(
            LLAVA,
            # The release's tokenizer adds the BOS itself (LlamaTokenizer, add_bos_token).
            tokenizer_extra={**LLAVA.tokenizer_extra, "add_bos_token": True},
        ),
        config_json=_llava_1_5_release,
        rename=_release_names,
        # The release's preprocessor_config.json (CLIPImageProcessor at 336 px).
        preprocessor={
            "crop_size": {"height": 336, "width": 336},
            "do_center_crop": True,
            "do_convert_rgb": True,
            "do_normalize": True,
            "do_rescale": True,
            "do_resize": True,
            "image_mean": CLIP_MEAN,
            "image_processor_type": "CLIPImageProcessor",
            "image_std": CLIP_STD,
            "processor_class": "LlavaProcessor",
            "resample": 3,
            "rescale_factor": 0.00392156862745098,
            "size": {"shortest_edge": 336},
        },
        chat_template=RELEASE_TEMPLATE,
    ),
)


def _llava_next_config(s: dict[str, int], vocab: int) -> Any:
    """LLaVA-1.5's tiny sizes with LLaVA-NeXT's grids, scaled to the 56 px tower."""
    from transformers import LlavaNextConfig

    llava = LLAVA.make_config(s, vocab)
    return LlavaNextConfig(
        text_config=llava.text_config.to_dict(),
        vision_config=llava.vision_config.to_dict(),
        image_token_index=s["<image>"],
        projector_hidden_act="gelu",
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        image_grid_pinpoints=[list(p) for p in NEXT_PINPOINTS],
        tie_word_embeddings=False,
    )


# llava-v1.6's grids, [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]], in
# the tiny tower's 56 px squares.
NEXT_PINPOINTS = ((56, 112), (112, 56), (112, 112), (168, 56), (56, 168))

LLAVA_NEXT = dataclasses.replace(
    LLAVA,
    family_key="llava_next",
    hf_class="LlavaNextForConditionalGeneration",
    make_config=_llava_next_config,
    # LlavaNextImageProcessor as llava-v1.6 ships it, at the tiny tower's 56 px.
    preprocessor={
        "crop_size": {"height": 56, "width": 56},
        "do_center_crop": True,
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_pad": True,
        "do_rescale": True,
        "do_resize": True,
        "image_grid_pinpoints": [list(p) for p in NEXT_PINPOINTS],
        "image_mean": CLIP_MEAN,
        "image_processor_type": "LlavaNextImageProcessor",
        "image_std": CLIP_STD,
        "processor_class": "LlavaNextProcessor",
        "resample": 3,
        "rescale_factor": 0.00392156862745098,
        "size": {"shortest_edge": 56},
    },
)
