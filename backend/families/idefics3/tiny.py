"""Tiny Idefics3 and SmolVLM checkpoints: NaViT SigLIP, the pixel-shuffle connector, Llama.

Their pictures are the tower's square (`max_image_size` = `image_size`), after the first
resize to four times that (`size.longest_edge`), as the releases' settings are
(Idefics3-8B-Llama3: 1,456 then 364 px; SmolVLM-256M-Instruct: 2,048 then 512 px).
The tiny checkpoints do not split pictures (`do_image_splitting: false`, so they convert
exactly), nor do the release-shaped ones (the releases do: an approximation, with consent).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.release import ReleaseSpec
from mmforge.backend.tiny.sizes import TEXT, VISION

# The releases' templates, reconstructed (no stored copy was found): Idefics2's layout
# (the role capitalised, ":" then a space unless the message starts with a picture, each
# picture as <image>, <end_of_utterance>\n after each message, "Assistant:" to prompt),
# which Idefics3-8B-Llama3 ships with `.capitalize()` after its BOS text, and SmolVLM with
# the `capitalize` filter after `<|im_start|>` (SmolVLMProcessor's default template in
# transformers 5.25 has that form, with a video branch besides).
_BODY = (
    "{% for message in messages %}{{message['role']CAP}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
IDEFICS3_TEMPLATE = "<|begin_of_text|>" + _BODY.replace("CAP", ".capitalize()")
SMOLVLM_TEMPLATE = "<|im_start|>" + _BODY.replace("CAP", " | capitalize")

MARKERS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"]


def _preprocessor(side: int, splitting: bool, processor: str) -> dict[str, Any]:
    return {
        "do_convert_rgb": True,
        "do_image_splitting": splitting,
        "do_normalize": True,
        "do_pad": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_processor_type": "Idefics3ImageProcessor",
        "image_std": [0.5, 0.5, 0.5],
        "max_image_size": {"longest_edge": side},
        "processor_class": processor,
        "resample": 1,
        "rescale_factor": 1 / 255,
        "size": {"longest_edge": 4 * side},
    }


def _config(
    model_type: str, image_size: int, patch: int, scale: int, bos: str, eos: str
) -> Callable[[dict[str, int], int], Any]:
    def make(s: dict[str, int], vocab: int) -> Any:
        import transformers

        cls = transformers.SmolVLMConfig if model_type == "smolvlm" else transformers.Idefics3Config
        text = {
            **TEXT,
            "model_type": "llama",
            "vocab_size": vocab,
            "hidden_act": "silu",
            "bos_token_id": s[bos],
            "eos_token_id": s[eos],
            "pad_token_id": s[eos],
            "rope_parameters": {"rope_type": "default", "rope_theta": 100000.0},
            "tie_word_embeddings": False,
        }
        vision = {
            **VISION,
            "image_size": image_size,
            "patch_size": patch,
            "hidden_act": "gelu_pytorch_tanh",
        }
        return cls(
            text_config=text,
            vision_config=vision,
            scale_factor=scale,
            image_token_id=s["<image>"],
            pad_token_id=s[eos],
            tie_word_embeddings=False,
        )

    return make


# Idefics3-8B-Llama3's shape: 14 px patches, shuffled by 2 (a 4 × 4 grid: 4 features).
IDEFICS3 = TinySpec(
    family_key="idefics3",
    hf_class="Idefics3ForConditionalGeneration",
    specials=["<|begin_of_text|>", "<|end_of_text|>", *MARKERS],
    make_config=_config("idefics3", 112, 14, 2, "<|begin_of_text|>", "<|end_of_text|>"),
    chat_template=IDEFICS3_TEMPLATE,
    tokenizer_extra={
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|end_of_text|>",
        "pad_token": "<|end_of_text|>",
        "add_bos_token": False,
    },
    preprocessor=_preprocessor(112, False, "Idefics3Processor"),
    eos_tokens=["<end_of_utterance>", "<|end_of_text|>"],
)

# SmolVLM-256M's shape: 16 px patches, shuffled by 4 (an 8 × 8 grid: 4 features).
SMOLVLM = TinySpec(
    family_key="smolvlm",
    hf_class="SmolVLMForConditionalGeneration",
    specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>", *MARKERS],
    make_config=_config("smolvlm", 128, 16, 4, "<|im_start|>", "<end_of_utterance>"),
    chat_template=SMOLVLM_TEMPLATE,
    tokenizer_extra={
        "bos_token": "<|im_start|>",
        "eos_token": "<end_of_utterance>",
        "pad_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
        "add_bos_token": False,
    },
    preprocessor=_preprocessor(128, False, "Idefics3Processor"),
    eos_tokens=["<end_of_utterance>"],
)


def _smolvlm_256m(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """HuggingFaceTB/SmolVLM-256M-Instruct's config.json, shrunk; reconstructed.

    No stored copy of the file was found: its shape follows what transformers 4.50 writes
    for SmolVLMConfig (a `llama` text_config with SmolLM2's 100,000 RoPE theta and 8,192
    positions, a `smolvlm_vision` tower of 16 px patches on 512 px, scale_factor 4,
    <image> as image_token_id). Widths, depths, heads and the vocabulary are shrunk, the
    tower to 128 px; token ids ours.
    """
    return {
        "architectures": ["SmolVLMForConditionalGeneration"],
        "image_token_id": s["<image>"],
        "model_type": "smolvlm",
        "scale_factor": 4,
        "text_config": {
            "head_dim": 16,
            "hidden_act": "silu",
            "hidden_size": 64,
            "intermediate_size": 128,
            "max_position_embeddings": 8192,
            "model_type": "llama",
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "num_key_value_heads": 2,
            "pad_token_id": s["<|im_end|>"],
            "rms_norm_eps": 1e-05,
            "rope_theta": 100000,
            "tie_word_embeddings": False,
            "vocab_size": vocab,
        },
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.50.0.dev0",
        "use_cache": True,
        "vision_config": {
            "hidden_size": 32,
            "image_size": 128,
            "intermediate_size": 64,
            "model_type": "smolvlm_vision",
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "patch_size": 16,
        },
        "vocab_size": vocab,
    }


def _idefics3_8b(s: dict[str, int], vocab: int) -> dict[str, Any]:
    """HuggingFaceM4/Idefics3-8B-Llama3's config.json, shrunk; reconstructed.

    No stored copy was found: transformers 4.45's Idefics3Config form (a `llama` text
    config with Llama 3's 500,000 RoPE theta, an `idefics3` tower of 14 px patches on
    364 px, scale_factor 2). Widths, depths, heads and the vocabulary shrunk, the tower to
    112 px; token ids ours.
    """
    return {
        "architectures": ["Idefics3ForConditionalGeneration"],
        "image_token_id": s["<image>"],
        "model_type": "idefics3",
        "scale_factor": 2,
        "text_config": {
            "hidden_size": 64,
            "intermediate_size": 128,
            "max_position_embeddings": 131072,
            "model_type": "llama",
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-05,
            "rope_theta": 500000.0,
            "vocab_size": vocab,
        },
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.45.0.dev0",
        "vision_config": {
            "hidden_size": 32,
            "image_size": 112,
            "intermediate_size": 64,
            "model_type": "idefics3",
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "patch_size": 14,
        },
    }


# The releases split pictures (do_image_splitting); these carry their settings without
# splitting, which convert exactly (test_smolvlm.py converts a splitting one with consent).
RELEASED_SMOLVLM = (
    ReleaseSpec(
        key="smolvlm-256m",
        release="HuggingFaceTB/SmolVLM-256M-Instruct",
        tiny=SMOLVLM,
        config_json=_smolvlm_256m,
        preprocessor=_preprocessor(128, False, "Idefics3Processor"),
    ),
)
RELEASED_IDEFICS3 = (
    ReleaseSpec(
        key="idefics3-8b",
        release="HuggingFaceM4/Idefics3-8B-Llama3",
        tiny=IDEFICS3,
        config_json=_idefics3_8b,
        preprocessor=_preprocessor(112, False, "Idefics3Processor"),
    ),
)
