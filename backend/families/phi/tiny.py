"""A tiny Phi-4-multimodal checkpoint: the family's real tokens, template and settings."""

from __future__ import annotations

from typing import Any

from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.sizes import TEXT, VISION


def _phi4mm_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Phi4MultimodalConfig

    text = {k: v for k, v in TEXT.items() if k != "head_dim"}
    vision = {
        **VISION,
        "image_size": 448,
        "patch_size": 14,
        "crop_size": 448,
        "image_token_id": s["<|endoftext10|>"],
        "feature_layer": -2,
    }
    audio = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_blocks": 2,
        "num_attention_heads": 2,
        "ext_pw_out_channel": 32,
        "depthwise_separable_out_channel": 32,
        "nemo_conv_channels": 32,
        "input_size": 80,
        "time_reduction": 8,
        "audio_token_id": s["<|endoftext11|>"],
    }
    return Phi4MultimodalConfig(
        **text,
        vocab_size=vocab,
        vision_config=vision,
        audio_config=audio,
        bos_token_id=s["<|endoftext|>"],
        eos_token_id=[s["<|endoftext|>"], s["<|end|>"]],
        pad_token_id=s["<|endoftext|>"],
        tie_word_embeddings=True,
    )


PHI4MM = TinySpec(
    family_key="phi4mm",
    hf_class="Phi4MultimodalForCausalLM",
    specials=["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"],
    # The runtime hard-codes these two ids and token strings (as in the released
    # tokenizer): filler vocabulary pads up to them.
    pinned={"<|endoftext10|>": 200010, "<|endoftext11|>": 200011},
    make_config=_phi4mm_config,
    # Attachments are numbered <|image_1|>, <|audio_1|>, ... as Phi-4-multimodal's prompt
    # format has them; the runtime rewrites those to the two special tokens.
    chat_template=(
        "{% set counts = namespace(image=0, audio=0) %}"
        "{% for message in messages %}<|{{ message['role'] }}|>"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'image' %}{% set counts.image = counts.image + 1 %}"
        "<|image_{{ counts.image }}|>"
        "{% elif part['type'] == 'audio' %}{% set counts.audio = counts.audio + 1 %}"
        "<|audio_{{ counts.audio }}|>"
        "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
        "{% endfor %}{% endif %}<|end|>{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    ),
    tokenizer_extra={
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "image_token": "<|endoftext10|>",
        "audio_token": "<|endoftext11|>",
    },
    preprocessor={
        "image_processor_type": "Phi4MultimodalImageProcessor",
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "dynamic_hd": 4,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "patch_size": 14,
        "resample": 3,
        "rescale_factor": 1 / 255,
        "size": {"height": 448, "width": 448},
    },
    audio_preprocessor={
        "feature_extractor_type": "Phi4MultimodalFeatureExtractor",
        "feature_size": 80,
        "sampling_rate": 16000,
        "padding_value": 0.0,
        "padding_side": "right",
        "return_attention_mask": True,
        "hop_length": 160,
        "n_fft": 512,
        "win_length": 400,
        "preemphasis": 0.97,
        "audio_compression_rate": 8,
        "audio_downsample_rate": 1,
        "audio_feat_stride": 1,
    },
    eos_tokens=["<|end|>", "<|endoftext|>"],
    embed_std=0.02,
)
