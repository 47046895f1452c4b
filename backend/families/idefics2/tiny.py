"""A tiny Idefics2 checkpoint: SigLIP (NaViT positions), the connector, a Mistral decoder."""

from __future__ import annotations

from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.sizes import TEXT, VISION

# HuggingFaceM4/idefics2-8b's chat template (its tokenizer_config.json, as transformers'
# Idefics2 tests and model card quote it): the role capitalised, ":" then a space unless
# the message starts with a picture, each picture as <image>, <end_of_utterance>\n after
# every message, "Assistant:" to prompt. The tokenizer adds the BOS; the tiny template
# writes it itself (ORT GenAI 0.18 adds none).
RELEASE_TEMPLATE = (
    "{% for message in messages %}{{message['role'].capitalize()}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

# Small pictures: the tower's 28 px (2×2 positions at patch 14) and up to 70 px a side.
_PREPROCESSOR: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_image_splitting": False,
    "do_normalize": True,
    "do_pad": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "Idefics2ImageProcessor",
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "Idefics2Processor",
    "resample": 2,
    "rescale_factor": 1 / 255,
    "size": {"longest_edge": 70, "shortest_edge": 28},
}


def _config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Idefics2Config

    text = {
        **TEXT,
        "model_type": "mistral",
        "vocab_size": vocab,
        "hidden_act": "silu",
        "sliding_window": 4096,
        "bos_token_id": s["<s>"],
        "eos_token_id": s["</s>"],
        "pad_token_id": s["<unk>"],
        "tie_word_embeddings": False,
    }
    vision = {**VISION, "image_size": 56, "patch_size": 14, "hidden_act": "gelu_pytorch_tanh"}
    perceiver = {
        "hidden_act": "silu",
        "hidden_size": TEXT["hidden_size"],
        "rms_norm_eps": 1e-5,
        "resampler_n_latents": 64,
        "resampler_depth": 2,
        "resampler_n_heads": 4,
        "resampler_head_dim": 8,
        "num_key_value_heads": 2,
    }
    return Idefics2Config(
        text_config=text,
        vision_config=vision,
        perceiver_config=perceiver,
        image_token_id=s["<image>"],
        tie_word_embeddings=False,
    )


IDEFICS2 = TinySpec(
    family_key="idefics2",
    hf_class="Idefics2ForConditionalGeneration",
    specials=["<unk>", "<s>", "</s>", "<fake_token_around_image>", "<image>", "<end_of_utterance>"],
    make_config=_config,
    chat_template="{{ bos_token }}" + RELEASE_TEMPLATE,
    tokenizer_extra={
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<unk>",
        "add_bos_token": False,
    },
    preprocessor=_PREPROCESSOR,
    eos_tokens=["<end_of_utterance>", "</s>"],
)
