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

# The Qwen text decoder with 3-D M-RoPE, as every Qwen-VL generation has it (Qwen2-VL too).
QWEN_TEXT_DECODER: tuple[Rule, ...] = (
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
)

_TEXT_COMMON: tuple[Rule, ...] = (
    *QWEN_TEXT_DECODER,
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


def _hybrid_kinds(value: object, cfg: object) -> bool:
    return isinstance(value, list) and all(
        t in ("linear_attention", "full_attention") for t in value
    )


# Qwen3.5 / Qwen3.6: the hybrid text model. transformers' Qwen3.5 classes always gate the
# attention output (sigmoid), always gate the DeltaNet norm with SiLU and keep the
# recurrence in float32; the releases write those facts as fields transformers never
# reads, so each is held to the one value transformers implements.
_QWEN3_5_TEXT: tuple[Rule, ...] = (
    *COMMON_INERT,
    *(r for r in _TEXT_COMMON if r.path != "text_config.hidden_act"),
    only(
        "text_config.hidden_act",
        "silu",
        note="transformers also uses it as the Gated DeltaNet's convolution activation, "
        "which the graphs build as SiLU (measured: gelu_pytorch_tanh FAILs at the decoder)",
    ),
    check(
        "text_config.layer_types",
        _hybrid_kinds,
        "linear_attention or full_attention per layer",
        "each layer is built as its entry says (measured on an irregular pattern)",
    ),
    honoured(
        "text_config.full_attention_interval",
        "the layer pattern when layer_types is not written out",
    ),
    honoured("text_config.attention_bias", "q/k/v/o biases are built when set"),
    *shapes(
        "text_config.",
        "linear_conv_kernel_dim",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_num_key_heads",
        "linear_num_value_heads",
    ),
    honoured(
        "text_config.rope_parameters.partial_rotary_factor",
        "the rotary part of each head (measured)",
    ),
    honoured("text_config.partial_rotary_factor", "read as rope_parameters' (measured)"),
    only(
        "text_config.rope_parameters.mrope_interleaved",
        True,
        note="the decoder interleaves the M-RoPE sections, as Qwen3.5 does",
    ),
    only(
        "text_config.attn_output_gate",
        True,
        None,
        note="transformers always gates the attention output; the graphs do too",
    ),
    only(
        "text_config.output_gate_type",
        "swish",
        None,
        note="the DeltaNet output norm is gated with SiLU, as in transformers",
    ),
    only(
        "text_config.mamba_ssm_dtype",
        "float32",
        None,
        note="the recurrent state is float32, as in transformers",
    ),
    inert("text_config.mtp_num_hidden_layers", "the multi-token-prediction head; not run"),
    inert("text_config.mtp_use_dedicated_embeddings", "the multi-token-prediction head"),
    only(
        "language_model_only",
        False,
        None,
        note="a text-only release has no vision tower to convert",
    ),
    only(
        "vision_config.hidden_act",
        "gelu_pytorch_tanh",
        note="the vision MLP is built with tanh-approximated GELU",
    ),
    inert(
        "vision_config.deepstack_visual_indexes",
        "transformers' Qwen3.5 tower has no DeepStack and does not read it",
    ),
    honoured("vision_config.num_position_embeddings", "the learned position table's size"),
)

QWEN3_5: tuple[Rule, ...] = _QWEN3_5_TEXT

QWEN3_5_MOE: tuple[Rule, ...] = (
    *_QWEN3_5_TEXT,
    *shapes(
        "text_config.",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
        "num_experts",
    ),
    honoured("text_config.num_experts_per_tok", "top-k routing (measured)"),
    inert("text_config.output_router_logits", "training-only router loss"),
    inert("text_config.router_aux_loss_coef", "training-only router loss"),
)
