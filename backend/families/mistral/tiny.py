"""A tiny Mistral 3 checkpoint: the family's real tokens, template and settings."""

from __future__ import annotations

from typing import Any

from mmforge.backend.tiny.build import TinySpec
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
