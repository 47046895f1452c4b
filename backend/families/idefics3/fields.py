"""Idefics3 / SmolVLM config fields (NaViT SigLIP tower, pixel-shuffle connector, Llama text)."""

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

IDEFICS3: tuple[Rule, ...] = (
    only(
        "text_config.model_type",
        "llama",
        note="Idefics3's Llama 3 and SmolVLM's SmolLM2 text models are Llama's",
    ),
    *COMMON_INERT,
    *shapes("text_config.", *TEXT_SIZES),
    honoured("text_config.hidden_act", "the decoder MLP's activation"),
    honoured("text_config.rms_norm_eps", "every decoder RMSNorm"),
    honoured("text_config.max_position_embeddings", "genai_config context_length"),
    honoured("text_config.rope_parameters.rope_theta", "the decoder's RoPE"),
    only(
        "text_config.rope_parameters.rope_type",
        "default",
        note="the decoder is built with plain RoPE, as the releases",
    ),
    only("text_config.attention_bias", False, note="Llama's projections have no biases"),
    only("text_config.mlp_bias", False, note="Llama's MLP has no biases"),
    inert("text_config.pretraining_tp", "transformers 5's Llama does not read it"),
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
    honoured(
        "vision_config.image_size",
        "the position grid, the picture's square side and the features per picture",
    ),
    honoured("vision_config.layer_norm_eps", "every tower LayerNorm"),
    only("vision_config.hidden_act", "gelu", *GELU_TANH, note="the tower's MLP activation"),
    inert("_pad_token_id", "the deprecated top-level pad id transformers 5 writes; unread"),
    honoured("scale_factor", "the connector's pixel shuffle and the features per picture"),
    *token_ids("image_token_id"),
)
