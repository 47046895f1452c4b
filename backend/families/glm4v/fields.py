"""GLM-4.1V config fields: honoured, checked or inert.

mmforge writes all three GLM-4.1V graphs itself (vision.py, embedding.py, decoder.py);
the fields listed as honoured are the ones they read (transformers 5.24's Glm4vConfig,
Glm4vTextConfig and Glm4vVisionConfig).
"""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._base import Cfg
from mmforge.backend.families._fields import (
    COMMON_INERT,
    Rule,
    check,
    honoured,
    inert,
    only,
    shapes,
    token_ids,
)


def _whole_heads(value: Any, cfg: Cfg) -> bool:
    """Transformers' GLM-4 attention splits hidden_size over the heads, whatever head_dim says."""
    text = cfg.sub("text_config")
    heads = int(text.get("num_attention_heads", 1))
    return value is None or int(value) == int(text.get("hidden_size", 0)) // heads


GLM4V: tuple[Rule, ...] = (
    *COMMON_INERT,
    *shapes(
        "text_config.",
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
    ),
    check(
        "text_config.head_dim",
        _whole_heads,
        "hidden_size / num_attention_heads",
        "transformers' GLM-4 attention ignores head_dim; genai_config's head_size would not",
    ),
    only("text_config.hidden_act", "silu", note="the decoder's gated MLP is built with SiLU"),
    honoured("text_config.rms_norm_eps", "every decoder RMSNorm (measured)"),
    honoured("text_config.max_position_embeddings", "genai_config context_length"),
    honoured("text_config.rope_parameters.rope_theta", "the decoder's M-RoPE (measured)"),
    honoured(
        "text_config.rope_parameters.partial_rotary_factor",
        "the rotated share of each head (measured)",
    ),
    honoured("text_config.rope_parameters.mrope_section", "the 3-D M-RoPE split (measured)"),
    only(
        "text_config.rope_parameters.rope_type",
        "default",
        note="the decoder builds plain M-RoPE, not YaRN or other scaled variants",
    ),
    inert("text_config.rope_parameters.mrope", "transformers 4's M-RoPE flag; the sections decide"),
    inert("text_config.image_token_id", "a copy the releases carry; the top-level id is read"),
    inert("text_config.video_token_id", "a copy the releases carry; the top-level id is read"),
    inert("text_config.attention_bias", "GLM-4's q/k/v always have biases in transformers"),
    honoured("text_config.tie_word_embeddings", "the checkpoint decides, as in transformers"),
    honoured("tie_word_embeddings", "the checkpoint decides, as in transformers"),
    *token_ids("image_token_id", "video_token_id", "image_start_token_id"),
    inert("image_end_token_id", "the template writes <|end_of_image|>; nothing computes with it"),
    inert("video_start_token_id", "videos: mmforge's chat takes pictures only"),
    inert("video_end_token_id", "videos: mmforge's chat takes pictures only"),
    *shapes(
        "vision_config.",
        "depth",
        "hidden_size",
        "intermediate_size",
        "num_heads",
        "in_channels",
        "patch_size",
        "spatial_merge_size",
        "temporal_patch_size",
        "out_hidden_size",
    ),
    honoured("vision_config.image_size", "the learned position grid (image_size / patch_size)²"),
    honoured("vision_config.rms_norm_eps", "every vision RMSNorm (measured)"),
    honoured("vision_config.attention_bias", "the vision qkv projection's bias"),
    only(
        "vision_config.hidden_act",
        "silu",
        note="the vision MLP and the merger's gate are built with SiLU, as released",
    ),
    honoured("vision_config.rope_parameters.rope_theta", "the vision tower's 2-D rotary table"),
    inert(
        "vision_config.rope_parameters.rope_type",
        "transformers builds axial 2-D RoPE and refuses any other type",
    ),
    inert("vision_config.hidden_dropout_prob", "training only"),
)
