"""A tiny Idefics2 checkpoint: SigLIP (NaViT positions), the connector, a Mistral decoder."""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec
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


def _idefics2_8b_release(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """HuggingFaceM4/idefics2-8b's config.json (transformers 4.40), shrunk.

    Reconstructed, not copied: the hub is not reachable here and no stored copy of the
    file was found. Its shape follows what transformers 4.40 wrote for the release and
    what its Idefics2Config reads: sub-configs with `model_type` "idefics2" (which
    transformers 5 drops), a perceiver_config without `hidden_size` or `rms_norm_eps`
    (transformers takes the text model's), a partial `mistral` text_config (vocabulary
    32,003, 1e-5 norms, 32k positions, a 4,096 window), the 980 px tower with 14 px
    patches (a 70 × 70 position grid, kept), image_token_id 32,001. Widths, depths, heads
    and the vocabulary are shrunk; token ids ours.
    """
    return {
        "architectures": ["Idefics2ForConditionalGeneration"],
        "image_token_id": s["<image>"],
        "model_type": "idefics2",
        "perceiver_config": {
            "model_type": "idefics2",
            "resampler_depth": 3,
            "resampler_head_dim": 8,
            "resampler_n_heads": 4,
            "resampler_n_latents": 64,
            "num_key_value_heads": 2,
        },
        "text_config": {
            "hidden_size": 64,
            "intermediate_size": 128,
            "max_position_embeddings": 32768,
            "model_type": "mistral",
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "num_key_value_heads": 2,
            "pad_token_id": s["<unk>"],
            "rms_norm_eps": 1e-05,
            "sliding_window": 4096,
            "vocab_size": vocab,
        },
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.40.0.dev0",
        "use_cache": True,
        "vision_config": {
            "hidden_size": 32,
            "image_size": 980,
            "intermediate_size": 64,
            "model_type": "idefics2",
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "patch_size": 14,
        },
    }


RELEASED_IDEFICS2 = (
    ReleaseSpec(
        key="idefics2-8b",
        release="HuggingFaceM4/idefics2-8b",
        tiny=dataclasses.replace(
            IDEFICS2,
            # The release's tokenizer adds the BOS itself (LlamaTokenizerFast, add_bos_token).
            tokenizer_extra={**IDEFICS2.tokenizer_extra, "add_bos_token": True},
        ),
        config_json=_idefics2_8b_release,
        # The release's processor settings (without splitting): 378 to 980 px a side, so
        # the tiny tower sees the release's patch grids on its 70 × 70 position grid.
        preprocessor={**_PREPROCESSOR, "size": {"longest_edge": 980, "shortest_edge": 378}},
        chat_template=RELEASE_TEMPLATE,
    ),
    # The same release with its image splitting on (the model card's advice to pass
    # do_image_splitting=False to save memory suggests the release splits; a stored
    # printout of an 8B processor shows false: docs/seed-families.md), five parts a
    # picture at the release's 378 to 980 px.
    ReleaseSpec(
        key="idefics2-8b-splitting",
        release="HuggingFaceM4/idefics2-8b",
        tiny=dataclasses.replace(
            IDEFICS2,
            tokenizer_extra={**IDEFICS2.tokenizer_extra, "add_bos_token": True},
        ),
        config_json=_idefics2_8b_release,
        preprocessor={
            **_PREPROCESSOR,
            "do_image_splitting": True,
            "size": {"longest_edge": 980, "shortest_edge": 378},
        },
        chat_template=RELEASE_TEMPLATE,
    ),
)
