"""Qwen2.5-VL and Qwen3-VL config fields: honoured, checked or inert.

Measured one field at a time by `scripts/field_survey.py` (a changed value converted
and verified against transformers): the text model follows its activation, norm epsilon,
RoPE theta and M-RoPE sections; the vision towers build a fixed activation (SiLU for
Qwen2.5-VL, tanh-approximated GELU for Qwen3-VL), so any other is refused.
"""

from __future__ import annotations

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

_TEXT_COMMON: tuple[Rule, ...] = (
    *shapes("text_config.", *TEXT_SIZES),
    honoured("text_config.hidden_act", "the decoder MLP's activation (measured)"),
    honoured("text_config.rms_norm_eps", "every decoder RMSNorm (measured)"),
    honoured("text_config.max_position_embeddings", "genai_config context_length"),
    honoured("text_config.rope_parameters.rope_theta", "the decoder's RoPE (measured)"),
    honoured("text_config.rope_parameters.mrope_section", "the 3-D M-RoPE split (measured)"),
    only(
        "text_config.rope_parameters.rope_type",
        "default",
        "mrope",
        note="the decoder builds plain (M-)RoPE, not YaRN or other scaled variants",
    ),
    honoured("text_config.tie_word_embeddings", "the checkpoint decides, as in transformers"),
    honoured("tie_word_embeddings", "the checkpoint decides, as in transformers"),
    *token_ids("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"),
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
    only(
        "vision_config.rope_parameters.rope_theta",
        10000.0,
        note="the vision tower's 2-D rotary table is built with theta 10000",
    ),
    inert("vision_config.rope_parameters.rope_type", "the vision tower's RoPE is always 2-D"),
)

QWEN2_5_VL: tuple[Rule, ...] = (
    *COMMON_INERT,
    *_TEXT_COMMON,
    inert("text_config.use_sliding_window", "transformers acts on it through layer_types"),
    inert("text_config.sliding_window", "transformers acts on it through layer_types"),
    inert("text_config.max_window_layers", "transformers acts on it through layer_types"),
    check(
        "text_config.layer_types",
        lambda v, cfg: v is None or all(t == "full_attention" for t in v),
        "full_attention on every layer",
        "the decoder builds no sliding-window layers",
    ),
    only(
        "vision_config.hidden_act",
        "silu",
        note="the vision MLP is built with SiLU, as released (measured: others FAIL)",
    ),
    honoured("vision_config.window_size", "windowed vision attention (measured)"),
    honoured("vision_config.fullatt_block_indexes", "which vision blocks see everything"),
    honoured("vision_config.tokens_per_second", "genai_config model.vision (video positions)"),
    inert("vision_config.in_chans", "transformers 4's duplicate of in_channels; not read"),
    inert("vision_config.spatial_patch_size", "transformers 4's duplicate of patch_size"),
)

QWEN3_VL: tuple[Rule, ...] = (
    *COMMON_INERT,
    *_TEXT_COMMON,
    honoured("text_config.attention_bias", "q/k/v/o biases are built when set"),
    only(
        "text_config.rope_parameters.mrope_interleaved",
        True,
        note="the decoder interleaves the M-RoPE sections, as Qwen3-VL does",
    ),
    only(
        "vision_config.hidden_act",
        "gelu_pytorch_tanh",
        note="the vision MLP is built with tanh-approximated GELU (measured: others FAIL)",
    ),
    honoured("vision_config.deepstack_visual_indexes", "DeepStack taps (measured)"),
    honoured("vision_config.num_position_embeddings", "the learned position table's size"),
)
