"""Phi-4-multimodal config fields: honoured, checked or inert.

Measured one field at a time by `scripts/field_survey.py`: the decoder follows its
activation, norm epsilon, RoPE theta and partial rotary factor; the SigLIP tower its
LayerNorm epsilon. The tower's activation and feature layer, and the audio encoder's
activations and attention layout, are built as released; other values are refused.
"""

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


def _rotary_agrees(value: Any, cfg: Cfg) -> bool:
    """A top-level partial_rotary_factor must be the one transformers uses."""
    used = cfg.get("rope_parameters.partial_rotary_factor", 1.0)
    return value is None or abs(float(value) - float(used)) < 1e-9


def _window_covers_context(value: Any, cfg: Cfg) -> bool:
    return value is None or int(value) >= int(cfg.get("max_position_embeddings", 0))


PHI4MM: tuple[Rule, ...] = (
    *COMMON_INERT,
    *shapes("", *TEXT_SIZES),
    honoured("hidden_act", "the decoder MLP's activation (measured)"),
    honoured("rms_norm_eps", "every decoder RMSNorm (measured)"),
    honoured("max_position_embeddings", "genai_config context_length"),
    honoured("rope_parameters.rope_theta", "the decoder's RoPE (measured)"),
    honoured("rope_parameters.partial_rotary_factor", "the rotated share of each head (measured)"),
    only("rope_parameters.rope_type", "default", "longrope", note="plain RoPE or LongRoPE"),
    honoured("rope_parameters.short_factor", "LongRoPE within the original context"),
    honoured("rope_parameters.long_factor", "LongRoPE past the original context"),
    honoured("rope_parameters.original_max_position_embeddings", "LongRoPE's switch point"),
    honoured("original_max_position_embeddings", "LongRoPE's switch point"),
    check(
        "partial_rotary_factor",
        _rotary_agrees,
        "unset, or equal to rope_parameters.partial_rotary_factor",
        "the graph builder reads the top-level key, transformers the RoPE parameters",
    ),
    check(
        "sliding_window",
        _window_covers_context,
        "unset, or at least max_position_embeddings",
        "the decoder builds no attention window",
    ),
    inert("resid_pdrop", "training only"),
    # Fields of the remote-code layout that transformers' native model fixes.
    only("attention_bias", False, note="the native model has no attention biases"),
    only("mlp_bias", False, note="the native model has no MLP biases"),
    only("lm_head_bias", False, note="the native model's output layer has no bias"),
    only("full_attn_mod", 1, note="every layer attends fully in the native model"),
    only("interpolate_factor", 1, note="the native model interpolates no positions"),
    only("audio_config.batch_norm", False, note="the native Conformer uses LayerNorm"),
    only("audio_config.bias_in_glu", True, note="the native Conformer's GLU has biases"),
    only("audio_config.causal", True, note="the native Conformer's convolution is causal"),
    only("audio_config.ext_pw_kernel_size", 1, note="the native Conformer's kernel"),
    inert("embd_pdrop", "training only"),
    honoured("tie_word_embeddings", "the checkpoint decides, as in transformers"),
    *shapes(
        "vision_config.",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_channels",
        "image_size",
        "patch_size",
    ),
    only(
        "vision_config.hidden_act",
        "gelu_pytorch_tanh",
        note="the SigLIP MLP is built with tanh-approximated GELU (measured: 'gelu' is off)",
    ),
    honoured("vision_config.layer_norm_eps", "every vision LayerNorm (measured)"),
    honoured("vision_config.crop_size", "the image processor's crop"),
    only(
        "vision_config.feature_layer",
        -2,
        note="the features are the tower's second-to-last layer (measured: -1 FAILs)",
    ),
    *token_ids("vision_config.image_token_id", "audio_config.audio_token_id"),
    *shapes(
        "audio_config.",
        "hidden_size",
        "intermediate_size",
        "num_blocks",
        "num_attention_heads",
        "ext_pw_out_channel",
        "depthwise_separable_out_channel",
        "depthwise_multiplier",
        "kernel_size",
        "input_size",
        "time_reduction",
        "bias_max_distance",
        "nemo_conv_channels",
        "nemo_final_size",
    ),
    only("audio_config.activation", "swish", "silu", note="the Conformer's activation"),
    only(
        "audio_config.conv_activation",
        "swish",
        "silu",
        note="the Conformer convolution's activation (measured: others FAIL)",
    ),
    only("audio_config.conv_glu_type", "swish", "silu", note="the convolution GLU's gate"),
    only(
        "audio_config.nemo_activation",
        "relu",
        note="the subsampling convolutions' activation (measured: others FAIL)",
    ),
    only(
        "audio_config.bias_symmetric",
        False,
        note="the relative attention bias is built one-sided, as released",
    ),
    only("audio_config.chunk_size", -1, note="the audio attention is built unchunked"),
    only("audio_config.left_chunk", 18, note="the audio attention's released left context"),
    only("audio_config.downsample_rate", 1, note="the audio projector is built unstrided"),
    only("audio_config.feature_layer", -2, note="the audio features' released layer"),
    inert("audio_config.dropout_rate", "training only"),
)
