"""Gemma 3n config fields: honoured, checked or inert.

mmforge writes all three graphs itself (vision.py, graphs.py); they read the fields listed
as honoured. The audio tower is not converted: its fields are inert but for the four the
embedding graph reads to embed audio-range ids as transformers does.
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
from mmforge.backend.families.gemma3n.vision import ARCHITECTURE, FEATURES

_AUDIO = "the audio tower is not converted (pictures and text only)"

GEMMA3N: tuple[Rule, ...] = (
    *COMMON_INERT,
    *shapes("text_config.", *TEXT_SIZES),
    honoured("text_config.vocab_size_per_layer_input", "the per-layer table's rows"),
    honoured("text_config.hidden_size_per_layer_input", "each layer's per-layer input width"),
    honoured("text_config.activation_sparsity_pattern", "the MLPs' Gaussian top-k"),
    honoured("text_config.altup_num_inputs", "AltUp's streams"),
    honoured("text_config.altup_active_idx", "the stream AltUp runs the layer on"),
    honoured("text_config.altup_correct_scale", "the corrected stream's output scale"),
    inert("text_config.altup_coef_clip", "clips AltUp's coefficients in training only"),
    honoured("text_config.laurel_rank", "the Laurel block's width"),
    honoured("text_config.layer_types", "which layers slide, and each layer's RoPE"),
    honoured("text_config.num_kv_shared_layers", "the last layers reuse earlier KV caches"),
    honoured("text_config.sliding_window", "the sliding layers' window"),
    honoured("text_config.final_logit_softcapping", "the logit soft-cap"),
    honoured("text_config.rms_norm_eps", "every decoder RMSNorm"),
    honoured("text_config.max_position_embeddings", "genai_config context_length"),
    honoured("text_config.rope_parameters.full_attention.rope_theta", "the global layers' RoPE"),
    honoured("text_config.rope_parameters.sliding_attention.rope_theta", "the local layers' RoPE"),
    honoured("text_config.rope_theta", "the global layers' RoPE (transformers 4's name)"),
    honoured("text_config.rope_local_base_freq", "the local layers' RoPE (transformers 4's name)"),
    only(
        "text_config.rope_parameters.full_attention.rope_type",
        "default",
        note="the decoder builds plain RoPE",
    ),
    only(
        "text_config.rope_parameters.sliding_attention.rope_type",
        "default",
        note="the decoder builds plain RoPE",
    ),
    only("text_config.rope_scaling", None, note="the decoder builds plain RoPE"),
    only(
        "text_config.hidden_activation",
        "gelu_pytorch_tanh",
        "gelu_new",
        "gelu_fast",
        note="the MLP and the per-layer gate use GELU with the tanh approximation",
    ),
    only("text_config.attention_bias", False, note="the decoder builds no attention biases"),
    honoured("text_config.tie_word_embeddings", "the checkpoint decides, as in transformers"),
    honoured("tie_word_embeddings", "the checkpoint decides, as in transformers"),
    check(
        "vision_config.architecture",
        lambda v, cfg: v == ARCHITECTURE,
        ARCHITECTURE,
        "the vision graph is timm's MobileNetV5-300M encoder (vision.py)",
    ),
    only("vision_config.model_args", None, note="timm's defaults, the tower as released"),
    honoured("vision_config.model_args.channel_multiplier", "the tower's channel widths"),
    check(
        "vision_config.hidden_size",
        lambda v, cfg: int(v) == FEATURES,
        str(FEATURES),
        "timm's encoder always gives 2048 features",
    ),
    honoured("vision_config.rms_norm_eps", "the vision embedder's RMSNorms"),
    honoured("vision_config.vocab_offset", "where vision-range ids start"),
    honoured("vision_config.vocab_size", "the vision embedder's table"),
    inert("vision_config.do_pooling", "Gemma 3n calls the tower with do_pooling=False"),
    inert("vision_config.label_names", "timm's classifier labels; the encoder has no head"),
    inert("vision_config.num_classes", "timm's classifier; the encoder has no head"),
    check(
        "vision_soft_tokens_per_image",
        lambda v, cfg: int(v) == 256,
        "256",
        "the adapter gives 16×16 soft tokens, and the runtime's gemma3 processor 256",
    ),
    honoured("audio_config.vocab_offset", "where audio-range ids start (embedding graph)"),
    honoured("audio_config.vocab_size", "the audio embedder's table (embedding graph)"),
    honoured("audio_config.hidden_size", "the audio embedder's width (embedding graph)"),
    honoured("audio_config.rms_norm_eps", "the audio embedder's RMSNorms (embedding graph)"),
    inert("audio_config.*", _AUDIO),
    inert("audio_soft_tokens_per_image", _AUDIO),
    inert("audio_token_id", _AUDIO),
    inert("boa_token_id", _AUDIO),
    inert("eoa_token_id", _AUDIO),
    *token_ids("image_token_id", "boi_token_id", "eoi_token_id"),
)
