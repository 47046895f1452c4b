"""LFM2-VL config fields: honoured, checked or inert.

mmforge builds LFM2-VL's vision graph itself (`vision.py`) and its decoder with ONNX
Runtime GenAI's builder (`decoder.py`); both read the fields listed as honoured, and
`scripts/field_survey.py` measured the ones that change the output.
"""

from __future__ import annotations

from mmforge.backend.families._fields import (
    COMMON_INERT,
    Rule,
    honoured,
    inert,
    only,
    shapes,
    token_ids,
)

LFM2_VL: tuple[Rule, ...] = (
    *COMMON_INERT,
    *shapes(
        "text_config.",
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "conv_L_cache",
        "block_multiple_of",
        "block_ffn_dim_multiplier",
        "block_auto_adjust_ff_dim",
    ),
    honoured("text_config.norm_eps", "every decoder RMSNorm (measured)"),
    honoured("text_config.max_position_embeddings", "genai_config context_length"),
    honoured("text_config.rope_parameters.rope_theta", "the attention layers' RoPE (measured)"),
    only(
        "text_config.rope_parameters.rope_type",
        "default",
        note="the decoder builds plain RoPE, not YaRN or other scaled variants",
    ),
    honoured("text_config.conv_bias", "the short convolutions' biases (measured)"),
    honoured("text_config.layer_types", "which layers are convolutions and which attention"),
    honoured("text_config.full_attn_idxs", "the attention layers, when layer_types is unset"),
    honoured("text_config.tie_word_embeddings", "the checkpoint decides, as in transformers"),
    honoured("tie_word_embeddings", "the checkpoint decides, as in transformers"),
    *shapes(
        "vision_config.",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_channels",
        "patch_size",
        "num_patches",
    ),
    honoured("vision_config.hidden_act", "the vision MLP's activation"),
    honoured("vision_config.layer_norm_eps", "every vision LayerNorm (measured)"),
    inert(
        "vision_config.vision_use_head",
        "LFM2-VL takes the tower's last hidden state; the pooling head is never called",
    ),
    only(
        "projector_hidden_act",
        "gelu",
        note="the projector is built with GELU, as released",
    ),
    shapes("", "projector_hidden_size")[0],
    honoured("projector_bias", "the projector's biases (measured)"),
    honoured("projector_use_layernorm", "the projector's LayerNorm (measured)"),
    honoured("downsample_factor", "the pixel-unshuffle factor"),
    *token_ids("image_token_id"),
)
