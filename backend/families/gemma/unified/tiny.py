"""A tiny Gemma 4 unified checkpoint: the family's real tokens, template and settings."""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.families.gemma.tiny import GEMMA4
from mmforge.backend.tiny.build import TinySpec
from mmforge.backend.tiny.sizes import TEXT


def _config(s: dict[str, int], vocab: int) -> Any:
    from transformers import Gemma4UnifiedConfig

    text = {
        **TEXT,
        "vocab_size": vocab,
        "global_head_dim": 32,
        # Shorter than an image prompt, so the bidirectional image block meets the window.
        "sliding_window": 64,
        "layer_types": ["sliding_attention", "full_attention"],
        "use_bidirectional_attention": "vision",
        "bos_token_id": s["<bos>"],
        "eos_token_id": [s["<eos>"], s["<end_of_turn>"]],
        "pad_token_id": s["<pad>"],
    }
    vision = {
        "patch_size": 4,
        "pooling_kernel_size": 2,  # model patches of 8x8 pixels (192 values)
        "mm_embed_dim": 48,
        "mm_posemb_size": 64,
        "output_proj_dims": 48,
    }
    audio = {"audio_embed_dim": 40}  # 40 samples per audio token
    return Gemma4UnifiedConfig(
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


TINY = TinySpec(
    family_key="gemma4_unified",
    hf_class="Gemma4UnifiedForConditionalGeneration",
    specials=list(GEMMA4.specials),
    make_config=_config,
    chat_template=GEMMA4.chat_template,
    tokenizer_extra=dict(GEMMA4.tokenizer_extra),
    preprocessor={
        "image_processor_type": "Gemma4UnifiedImageProcessor",
        "do_convert_rgb": True,
        "do_normalize": False,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": [0.0, 0.0, 0.0],
        "image_std": [1.0, 1.0, 1.0],
        "max_soft_tokens": 70,
        "patch_size": 4,
        "pooling_kernel_size": 2,
        "resample": 3,
        "rescale_factor": 1 / 255,
    },
    audio_preprocessor={
        "feature_extractor_type": "Gemma4UnifiedAudioFeatureExtractor",
        "feature_size": 40,
        "audio_samples_per_token": 40,
        "sampling_rate": 16000,
        "padding_value": 0.0,
        "padding_side": "right",
        "return_attention_mask": True,
    },
    eos_tokens=["<end_of_turn>", "<eos>"],
    embed_std=0.02,
    logit_gain=10.0,
)


def _k_eq_v() -> TinySpec:
    from mmforge.backend.families.gemma.tiny_large import K_EQ_V, text_overrides

    return dataclasses.replace(TINY, make_config=text_overrides(K_EQ_V, TINY), vector_std=0.1)


# K = V with 1 global KV head (Gemma 4 unified's text model has no expert block in
# transformers 5.24), run by tests/backend/test_gemma4_large.py.
TINY_K_EQ_V = _k_eq_v()
