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


def _groups_fit(value: Any, cfg: Cfg) -> bool:
    """n_group splits the routed experts into groups of two or more.

    transformers scores a group by its two best experts.
    """
    text = cfg.sub("text_config")
    experts = text.get("n_routed_experts", 128)
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, int) or not isinstance(experts, int):
        return False
    return value >= 1 and experts % value == 0 and experts // value >= 2


def _kept_groups(value: Any, cfg: Cfg) -> bool:
    """topk_group keeps between 1 and n_group groups, with num_experts_per_tok experts in them."""
    text = cfg.sub("text_config")
    groups, experts = text.get("n_group", 1), text.get("n_routed_experts", 128)
    top_k = text.get("num_experts_per_tok", 8)
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    if not _groups_fit(groups, cfg):
        return True  # n_group's own rule refuses it
    if not all(isinstance(v, int) and v > 0 for v in (groups, experts, top_k)):
        return False
    return bool(1 <= value <= groups and top_k <= value * (experts // groups))


# GLM-4.1V's rules that GLM-4.5V's decoder reads otherwise.
_MOE_DIFFERS = {"text_config.head_dim", "text_config.attention_bias"}

GLM4V_MOE: tuple[Rule, ...] = (
    *(r for r in GLM4V if r.path not in _MOE_DIFFERS),
    honoured("text_config.head_dim", "each head's width (the release: 128, not 4096 / 96)"),
    honoured("text_config.attention_bias", "q, k and v biases (measured)"),
    *shapes("text_config.", "moe_intermediate_size", "n_routed_experts", "n_shared_experts"),
    honoured("text_config.num_experts_per_tok", "experts a token (measured)"),
    honoured("text_config.first_k_dense_replace", "the dense first layers (measured)"),
    honoured("text_config.routed_scaling_factor", "scales the routing weights (measured)"),
    honoured("text_config.norm_topk_prob", "the chosen weights divided by their sum (measured)"),
    check(
        "text_config.n_group",
        _groups_fit,
        "a divisor of n_routed_experts leaving two or more experts a group",
        "transformers scores each group by its two best experts",
    ),
    check(
        "text_config.topk_group",
        _kept_groups,
        "1 to n_group groups, holding num_experts_per_tok experts or more",
        "the groups the router keeps before choosing experts",
    ),
    only(
        "text_config.use_qk_norm",
        False,
        None,
        note="transformers 5.24's GLM-4.5V attention has no q/k norm (the release: false)",
    ),
    inert(
        "text_config.num_nextn_predict_layers",
        "GLM-4.5's next-n (multi-token prediction) layers: transformers builds none and "
        "drops their tensors on load; so does the package (GLM-4.5V's release has none)",
    ),
    inert("text_config.output_router_logits", "training-only router loss"),
    inert("text_config.router_aux_loss_coef", "training-only router loss"),
    inert(
        "text_config.image_start_token_id", "a copy the release carries; the top-level id is read"
    ),
    inert("text_config.image_end_token_id", "a copy the release carries; nothing computes with it"),
)
