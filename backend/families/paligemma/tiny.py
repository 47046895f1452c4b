"""A tiny PaliGemma checkpoint: the family's real tokens, prompt layout and settings."""

from __future__ import annotations

from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.sizes import TEXT, VISION

# PaliGemma's prompt is not a chat: transformers' PaliGemmaProcessor writes `<image>` per
# picture, then `<bos>`, the prefix and "\n" (processing_paligemma.py,
# prepare_inputs_layout). The released tokenizers carry no chat template; this one writes
# that layout for one user message so that a chat template exists to apply.
CHAT_TEMPLATE = (
    "{% if messages | length != 1 or messages[0]['role'] != 'user' %}"
    "{{ raise_exception('PaliGemma takes one user message: a picture and a prefix') }}"
    "{% endif %}"
    "{% set content = messages[0]['content'] %}"
    "{% if content is string %}{{ bos_token }}{{ content }}"
    "{% else %}{% for part in content %}{% if part['type'] == 'image' %}{{ IMAGE }}"
    "{% endif %}{% endfor %}{{ bos_token }}{% for part in content %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "\n"
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
    preprocessor={
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
    },
    eos_tokens=["<eos>"],
    embed_std=0.005,
    logit_gain=10.0,
)
