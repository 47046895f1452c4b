"""Mistral 3 config fields: honoured, checked or inert.

Measured one field at a time by `scripts/field_survey.py`: the text model follows its
activation, norm epsilon, RoPE theta and sliding window; the Pixtral tower follows its
RoPE theta but builds SiLU, the projector builds GELU, and the features come from the
tower's last layer, and the projector has no biases, so other values of those four are
refused.
"""

from __future__ import annotations

from mmforge.backend.families._fields import (
    COMMON_INERT,
    TEXT_SIZES,
    Rule,
    honoured,
    inert,
    only,
    shapes,
    token_ids,
)

MISTRAL3: tuple[Rule, ...] = (
    *COMMON_INERT,
    *shapes("text_config.", *TEXT_SIZES),
    honoured("text_config.hidden_act", "the decoder MLP's activation (measured)"),
    honoured("text_config.rms_norm_eps", "every decoder RMSNorm (measured)"),
    honoured("text_config.max_position_embeddings", "genai_config context_length"),
    honoured("text_config.rope_parameters.rope_theta", "the decoder's RoPE (measured)"),
    only(
        "text_config.rope_parameters.rope_type",
        "default",
        "yarn",
        note="the decoder builds plain RoPE or YaRN (Ministral 3), not other scaled variants",
    ),
    honoured("text_config.rope_parameters.factor", "YaRN's scaling factor (measured)"),
    honoured("text_config.rope_parameters.original_max_position_embeddings", "YaRN (measured)"),
    honoured("text_config.rope_parameters.beta_fast", "YaRN's ramp (measured)"),
    honoured("text_config.rope_parameters.beta_slow", "YaRN's ramp (measured)"),
    honoured("text_config.rope_parameters.mscale", "YaRN's attention factor (measured)"),
    honoured("text_config.rope_parameters.mscale_all_dim", "YaRN's attention factor (measured)"),
    honoured(
        "text_config.rope_parameters.llama_4_scaling_beta",
        "query scaling past the original context (measured across the boundary)",
    ),
    honoured("text_config.sliding_window", "the decoder's attention window (measured)"),
    honoured("text_config.tie_word_embeddings", "the checkpoint decides, as in transformers"),
    honoured("tie_word_embeddings", "the checkpoint decides, as in transformers"),
    *shapes(
        "vision_config.",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "head_dim",
        "num_channels",
        "patch_size",
    ),
    honoured("vision_config.image_size", "the processor's longest edge when it sets none"),
    honoured(
        "vision_config.hidden_act",
        "the Pixtral MLP's activation (mobius 0.1 fixes SiLU; set per layer; measured)",
    ),
    honoured("vision_config.rope_parameters.rope_theta", "the tower's 2-D RoPE (measured)"),
    inert("vision_config.rope_parameters.rope_type", "Pixtral's RoPE is always 2-D"),
    inert("vision_config.vocab_size", "the vision tower has no vocabulary"),
    only(
        "projector_hidden_act",
        "gelu",
        note="the projector is built with GELU, as released (measured: others FAIL)",
    ),
    only(
        "multimodal_projector_bias",
        False,
        note="the projector is built without biases, as released (measured: True FAILs)",
    ),
    only(
        "vision_feature_layer",
        -1,
        note="the features are the tower's last layer, as released (measured: -2 FAILs)",
    ),
    honoured("spatial_merge_size", "the patch merge and genai_config (measured)"),
    *token_ids("image_token_index"),
)
