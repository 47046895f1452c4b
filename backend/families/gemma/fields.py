"""Gemma 3 and Gemma 4 config fields: honoured, checked or inert.

Measured one field at a time by `scripts/field_survey.py`. Gemma 3's decoder follows
its activation, norm epsilon, both RoPE thetas, window, layer pattern, attention biases
and (through `build.query_pre_attn_scalar`) its attention scale; its SigLIP tower builds
tanh-approximated GELU. Gemma 4's decoder follows its activation, RoPE, window and final
soft-cap; its vision and audio towers and the embedders between them use the released
activations and epsilons only.
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

_TIED = (
    honoured("text_config.tie_word_embeddings", "the checkpoint decides, as in transformers"),
    honoured("tie_word_embeddings", "the checkpoint decides, as in transformers"),
)

GEMMA3: tuple[Rule, ...] = (
    *COMMON_INERT,
    *_TIED,
    *shapes("text_config.", *TEXT_SIZES),
    honoured("text_config.hidden_activation", "the decoder MLP's activation (measured)"),
    honoured("text_config.rms_norm_eps", "every decoder RMSNorm (measured)"),
    honoured("text_config.max_position_embeddings", "genai_config context_length"),
    honoured("text_config.rope_parameters.full_attention.rope_theta", "global layers (measured)"),
    honoured("text_config.rope_parameters.sliding_attention.rope_theta", "local layers (measured)"),
    only(
        "text_config.rope_parameters.sliding_attention.rope_type",
        "default",
        note="the local layers build plain RoPE",
    ),
    check(
        "text_config.rope_parameters.full_attention.rope_type",
        lambda v, cfg: v in ("default", "linear"),
        "'default' or 'linear'",
        "the global layers build plain or linearly scaled RoPE",
    ),
    honoured(
        "text_config.rope_parameters.full_attention.factor",
        "linear RoPE scaling of the global layers, as released (measured)",
    ),
    honoured("text_config.query_pre_attn_scalar", "the attention scale (measured)"),
    honoured("text_config.sliding_window", "the local layers' window (measured)"),
    honoured("text_config.layer_types", "the local/global layer pattern (measured)"),
    inert("text_config._sliding_window_pattern", "transformers acts on it through layer_types"),
    honoured("text_config.attention_bias", "q/k/v/o biases are built when set (measured)"),
    inert(
        "text_config.final_logit_softcapping",
        "Gemma3ForConditionalGeneration does not apply it (measured)",
    ),
    only(
        "text_config.attn_logit_softcapping",
        None,
        note="the decoder builds no attention soft-cap; released Gemma 3 has none",
    ),
    only(
        "text_config.use_bidirectional_attention",
        False,
        None,
        note="text attends causally (image tokens bidirectionally), as in released Gemma 3",
    ),
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
        note="the SigLIP MLP is built with tanh-approximated GELU (measured: others FAIL)",
    ),
    honoured("vision_config.layer_norm_eps", "every vision LayerNorm (measured)"),
    inert(
        "vision_config.vision_use_head",
        "Gemma 3 takes the tower's last hidden state; the pooling head is never called",
    ),
    honoured("mm_tokens_per_image", "the projector's pooling and the processor JSON"),
    *token_ids("boi_token_index", "eoi_token_index", "image_token_index"),
    inert("initializer_range"),
)

GEMMA4: tuple[Rule, ...] = (
    *COMMON_INERT,
    honoured("vision_config", "when null, no vision encoder is built"),
    honoured("audio_config", "when null, no audio encoder is built"),
    *_TIED,
    *shapes(
        "text_config.", *TEXT_SIZES, "vocab_size_per_layer_input", "hidden_size_per_layer_input"
    ),
    honoured("text_config.per_layer_config.*", "the global layers' head size and KV head count"),
    honoured("text_config.hidden_activation", "the decoder MLP's activation (measured)"),
    only(
        "text_config.rms_norm_eps",
        1e-6,
        note="the audio embedder is built with the released epsilon (measured: others FAIL)",
    ),
    honoured("text_config.max_position_embeddings", "genai_config context_length"),
    honoured("text_config.rope_parameters.*", "both layer kinds' RoPE (measured)"),
    honoured("text_config.sliding_window", "the local layers' window (measured)"),
    honoured(
        "text_config.layer_types",
        "the local/global pattern (global layers' weights differ in shape, so a pattern "
        "that disagrees with the checkpoint cannot convert)",
    ),
    honoured("text_config.final_logit_softcapping", "the output soft-cap (measured)"),
    only(
        "text_config.attention_bias",
        False,
        note="the decoder builds no attention biases, as released (measured: True FAILs)",
    ),
    honoured("text_config.use_double_wide_mlp", "KV-shared layers' MLP width (measured)"),
    check(
        "text_config.use_bidirectional_attention",
        lambda v, cfg: v != "all",
        "unset or 'vision'",
        "with 'all', every token attends both ways: not a decoder the runtime can drive",
    ),
    honoured(
        "text_config.num_kv_shared_layers",
        "layers reusing an earlier KV cache (measured on 4 layers, 2 shared)",
    ),
    honoured(
        "text_config.attention_k_eq_v",
        "global layers take V from the key projection, v_norm'd (moe.py; measured)",
    ),
    honoured("text_config.enable_moe_block", "the router and expert blocks (moe.py; measured)"),
    honoured("text_config.num_experts", "the router's width and the expert count (measured)"),
    honoured("text_config.top_k_experts", "experts chosen per token (measured)"),
    honoured("text_config.moe_intermediate_size", "each expert's width (measured)"),
    *shapes(
        "vision_config.",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "patch_size",
        "position_embedding_size",
    ),
    honoured("vision_config.pooling_kernel_size", "the vision pooler"),
    only(
        "vision_config.hidden_activation",
        "gelu_pytorch_tanh",
        note="the vision MLP is built with tanh-approximated GELU (measured: others FAIL)",
    ),
    only(
        "vision_config.rms_norm_eps",
        1e-6,
        note="the vision norms are built with the released epsilon (measured: others FAIL)",
    ),
    inert("vision_config.max_position_embeddings", "the vision RoPE takes patch positions"),
    only("vision_config.attention_bias", False, note="the vision tower builds no biases"),
    only(
        "vision_config.rope_parameters.rope_theta",
        100.0,
        note="the vision RoPE is built with the released theta (measured: others FAIL)",
    ),
    inert("vision_config.rope_parameters.rope_type", "the vision RoPE is always 2-D"),
    honoured("vision_config.use_clipped_linears", "clipped vision linears (measured)"),
    honoured("vision_config.standardize", "the pooled features' standardisation (measured)"),
    *shapes(
        "audio_config.",
        "hidden_size",
        "num_hidden_layers",
        "subsampling_conv_channels",
        "conv_kernel_size",
        "output_proj_dims",
    ),
    only(
        "audio_config.num_attention_heads",
        8,
        note="the graph builder (mobius 0.1) supports the released layout with 8",
    ),
    only("audio_config.hidden_act", "silu", note="the audio tower is built with SiLU"),
    only("audio_config.rms_norm_eps", 1e-6, note="the audio norms use the released epsilon"),
    only("audio_config.residual_weight", 0.5, note="the audio blocks use the released weight"),
    only("audio_config.attention_logit_cap", 50.0, note="the audio attention's released cap"),
    only(
        "audio_config.attention_chunk_size",
        12,
        note="the audio attention's released chunks (measured: others FAIL)",
    ),
    only(
        "audio_config.attention_context_left",
        13,
        note="the audio attention's released left context (measured: others FAIL)",
    ),
    only("audio_config.attention_context_right", 0, note="the audio attention looks back only"),
    inert("audio_config.attention_invalid_logits_value", "masked audio logits (any large value)"),
    only("audio_config.use_clipped_linears", True, note="the audio linears are built clipped"),
    inert("audio_config.gradient_clipping", "training only"),
    *token_ids(
        "boi_token_id",
        "eoi_token_id",
        "image_token_id",
        "video_token_id",
        "boa_token_id",
        "eoa_token_index",
        "audio_token_id",
    ),
    inert("initializer_range"),
)
