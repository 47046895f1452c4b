"""Idefics2 config fields (NaViT SigLIP tower, connector, Mistral text model)."""

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
from mmforge.backend.families.components.graph_builder import GELU_TANH

_ACTS = ("silu", "gelu", *GELU_TANH)

IDEFICS2: tuple[Rule, ...] = (
    only("text_config.model_type", "mistral", note="Idefics2's Mistral text model"),
    *COMMON_INERT,
    *shapes("text_config.", *TEXT_SIZES),
    honoured(
        "text_config.hidden_act",
        "the decoder MLP's and the modality projection's activation",
    ),
    honoured("text_config.rms_norm_eps", "every decoder RMSNorm"),
    honoured("text_config.max_position_embeddings", "genai_config context_length"),
    honoured("text_config.rope_parameters.rope_theta", "the decoder's RoPE"),
    only(
        "text_config.rope_parameters.rope_type",
        "default",
        note="the decoder is built with plain RoPE, as Idefics2 releases",
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
        "num_channels",
        "patch_size",
    ),
    honoured("vision_config.image_size", "the position grid the patches are bucketed onto"),
    honoured("vision_config.layer_norm_eps", "every tower LayerNorm"),
    only("vision_config.hidden_act", *_ACTS, note="the tower's MLP activation"),
    *(
        inert(f"perceiver_config.{rule.path}", rule.note)
        for rule in COMMON_INERT
        if "." not in rule.path
    ),
    *shapes(
        "perceiver_config.",
        "hidden_size",
        "resampler_depth",
        "resampler_head_dim",
        "resampler_n_heads",
        "num_key_value_heads",
    ),
    honoured(
        "perceiver_config.resampler_n_latents",
        "the features per picture, vision.num_visual_tokens",
    ),
    honoured("perceiver_config.rms_norm_eps", "the resampler's RMSNorms"),
    only("perceiver_config.hidden_act", *_ACTS, note="the resampler MLP's activation"),
    *token_ids("image_token_id"),
)
