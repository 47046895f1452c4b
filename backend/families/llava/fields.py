"""LLaVA-1.5 config fields (CLIP tower, Llama text model): honoured, checked or inert."""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._base import Cfg
from mmforge.backend.families._fields import (
    COMMON_INERT,
    TEXT_SIZES,
    Rule,
    check,
    honoured,
    inert,
    only,
    shapes,
    token_ids,
)
from mmforge.backend.families.llava.graphs import PROJECTOR_ACTS, VISION_ACTS


def _layer_in_tower(value: Any, cfg: Cfg) -> bool:
    depth = int(cfg.get("vision_config.num_hidden_layers", 24))
    layers = value if isinstance(value, list) else [value]
    return bool(layers) and all(
        isinstance(v, int) and not isinstance(v, bool) and -depth - 1 <= v <= depth for v in layers
    )


_TEXT: tuple[Rule, ...] = (
    only("text_config.model_type", "llama", note="LLaVA-1.5's Vicuna (Llama) text model"),
    *COMMON_INERT,
    *shapes("text_config.", *TEXT_SIZES),
    honoured("text_config.hidden_act", "the decoder MLP's activation (measured)"),
    honoured("text_config.rms_norm_eps", "every decoder RMSNorm (measured)"),
    honoured("text_config.max_position_embeddings", "genai_config context_length"),
    honoured("text_config.rope_parameters.rope_theta", "the decoder's RoPE (measured)"),
    only(
        "text_config.rope_parameters.rope_type",
        "default",
        note="the decoder is built with plain RoPE, as LLaVA-1.5 releases",
    ),
    only("text_config.attention_bias", False, note="Llama's projections have no biases"),
    only("text_config.mlp_bias", False, note="Llama's MLP has no biases"),
    inert("text_config.pretraining_tp", "transformers 5's Llama does not read it"),
    honoured("text_config.tie_word_embeddings", "the checkpoint decides, as in transformers"),
    honoured("tie_word_embeddings", "the checkpoint decides, as in transformers"),
)

_TOWER: tuple[Rule, ...] = (
    only("vision_config.model_type", "clip_vision_model", note="LLaVA-1.5's CLIP tower"),
    *shapes(
        "vision_config.",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_channels",
        "patch_size",
    ),
    honoured("vision_config.image_size", "the tower's positions and the token count K"),
    honoured("vision_config.layer_norm_eps", "every tower LayerNorm (measured)"),
    only(
        "vision_config.hidden_act",
        *VISION_ACTS,
        note="the tower's MLP activation (CLIP's quick_gelu, or gelu)",
    ),
    inert("vision_config.projection_dim", "CLIP's projection head, which LLaVA never runs"),
    inert("vision_config.vocab_size", "the vision tower has no vocabulary"),
    inert("vision_config.initializer_factor", "initialisation only"),
    inert("image_seq_length", "LlavaProcessor counts the processed pixels' patches instead"),
    inert("ignore_index", "training-only"),
    inert("text_config.is_composition", "transformers 4 bookkeeping"),
    inert("vision_config.is_composition", "transformers 4 bookkeeping"),
    *token_ids("image_token_index"),
)

LLAVA: tuple[Rule, ...] = (
    *_TEXT,
    *_TOWER,
    only(
        "projector_hidden_act",
        *PROJECTOR_ACTS,
        note="the projector is built with GELU, as released",
    ),
    honoured("multimodal_projector_bias", "the projector's two biases (measured)"),
    check(
        "vision_feature_layer",
        _layer_in_tower,
        "a layer index (or a list of them) within the tower",
        note="the hidden states the features are read from (measured: -1 and -2 differ)",
    ),
    only(
        "vision_feature_select_strategy",
        "default",
        "full",
        note="default drops the class token, full keeps it (K + 1 ids per picture)",
    ),
)

VIPLLAVA: tuple[Rule, ...] = (
    *_TEXT,
    *_TOWER,
    only(
        "projector_hidden_act",
        *PROJECTOR_ACTS,
        note="the projector is built with GELU, as released",
    ),
    honoured("projector_layernorm_eps", "the projector's LayerNorm"),
    check(
        "vision_feature_layer",
        _layer_in_tower,
        "a layer index (or a list of them) within the tower",
        note="the hidden states concatenated into the features",
    ),
    check(
        "vision_feature_layers",
        _layer_in_tower,
        "a list of layer indices within the tower",
        note="transformers 4's name of vision_feature_layer",
    ),
)

# Video-LLaVA: LLaVA-1.5's fields (one CLIP vision_config serves both towers) and the
# video's, which a package for pictures does not use.
VIDEO_LLAVA: tuple[Rule, ...] = (
    *LLAVA,
    inert(
        "video_token_index",
        "the package takes pictures only: the runtime has no video input, so no <video> "
        "id is ever expanded or filled",
    ),
    inert("video_seq_length", "VideoLlavaProcessor counts the frames' patches instead"),
)
