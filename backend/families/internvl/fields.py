"""InternVL 3 / 3.5 config fields (InternViT tower, Qwen2 or Qwen3 text model)."""

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
from mmforge.backend.families.internvl.graphs import ACTS, NORMS


def _layer_in_tower(value: Any, cfg: Cfg) -> bool:
    depth = int(cfg.get("vision_config.num_hidden_layers", 24))
    return isinstance(value, int) and not isinstance(value, bool) and -depth - 1 <= value <= depth


def _full_attention(value: Any, cfg: Cfg) -> bool:
    return value is None or all(kind == "full_attention" for kind in value)


def _square(value: Any, cfg: Cfg) -> bool:
    pair = value if isinstance(value, (list, tuple)) else [value, value]
    return len(pair) == 2 and pair[0] == pair[1] and isinstance(pair[0], int)


INTERNVL: tuple[Rule, ...] = (
    only(
        "text_config.model_type",
        "qwen2",
        "qwen3",
        note="InternVL 3's Qwen2 and InternVL 3.5's Qwen3 text models",
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
    only(
        "text_config.attention_bias",
        False,
        note="Qwen3's projections have no biases (Qwen2's q/k/v always do)",
    ),
    only(
        "text_config.use_sliding_window",
        False,
        note="the decoder attends fully, as the releases (no sliding window)",
    ),
    inert("text_config.sliding_window", "read only with use_sliding_window"),
    inert("text_config.max_window_layers", "read only with use_sliding_window"),
    check(
        "text_config.layer_types",
        _full_attention,
        "full_attention for every layer",
        note="the decoder attends fully",
    ),
    honoured("text_config.tie_word_embeddings", "the checkpoint decides, as in transformers"),
    honoured("tie_word_embeddings", "the checkpoint decides, as in transformers"),
    *shapes(
        "vision_config.",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_channels",
    ),
    check(
        "vision_config.image_size",
        _square,
        "a square view",
        note="the view's side: positions and the token count K",
    ),
    check("vision_config.patch_size", _square, "square patches", note="the patch Conv"),
    honoured("vision_config.layer_norm_eps", "every tower norm"),
    only("vision_config.hidden_act", *ACTS, note="the tower's MLP activation"),
    only("vision_config.norm_type", *NORMS, note="the tower's norms"),
    honoured("vision_config.attention_bias", "the q/k/v biases"),
    honoured("vision_config.use_qk_norm", "q_norm / k_norm over the whole width"),
    honoured(
        "vision_config.use_mean_pooling",
        "false: the last hidden state passes the tower's final LayerNorm",
    ),
    only(
        "vision_config.use_absolute_position_embeddings",
        True,
        note="the releases' position table",
    ),
    inert("vision_config.use_mask_token", "masked image modelling only"),
    inert("vision_config.layer_scale_init_value", "initialisation only (lambda_1/2 are weights)"),
    inert("vision_config.hidden_dropout_prob", "training-only"),
    inert("vision_config.projection_dropout", "training-only"),
    honoured("downsample_ratio", "the pixel shuffle and the token count K"),
    only("projector_hidden_act", *ACTS, note="the projector's activation"),
    check(
        "vision_feature_layer",
        _layer_in_tower,
        "one layer index within the tower",
        note="the hidden state the features are read from",
    ),
    only(
        "vision_feature_select_strategy",
        "default",
        note="the CLS token dropped (full would not make a square grid)",
    ),
    inert(
        "image_seq_length",
        "InternVLProcessor's count per view; the package counts the tower's grid",
    ),
    *token_ids("image_token_id"),
)
