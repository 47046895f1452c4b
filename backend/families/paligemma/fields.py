"""PaliGemma config fields: honoured, checked or inert.

mmforge writes all three PaliGemma graphs itself (graphs.py); they read the fields
listed as honoured.
"""

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

PALIGEMMA: tuple[Rule, ...] = (
    *COMMON_INERT,
    *shapes("text_config.", *TEXT_SIZES),
    honoured("text_config.rms_norm_eps", "every decoder RMSNorm"),
    honoured("text_config.max_position_embeddings", "genai_config context_length"),
    honoured("text_config.rope_parameters.rope_theta", "the decoder's RoPE"),
    honoured("text_config.rope_theta", "the decoder's RoPE (transformers 4's name)"),
    only(
        "text_config.rope_parameters.rope_type",
        "default",
        note="the decoder builds plain RoPE, not scaled variants",
    ),
    only("text_config.rope_scaling", None, note="the decoder builds plain RoPE"),
    honoured(
        "text_config.hidden_activation",
        "Gemma 2's MLP activation (PaliGemma 2); Gemma's MLP reads hidden_act instead",
    ),
    honoured("text_config.hidden_act", "Gemma's MLP activation (PaliGemma)"),
    honoured("text_config.attention_bias", "the attention projections' biases"),
    inert(
        "text_config.use_bidirectional_attention",
        "PaliGemmaModel builds its own mask (prefix both ways at prefill), which the "
        "decoder graph builds too; the language model's own flag is never read",
    ),
    honoured("text_config.num_image_tokens", "vision.num_visual_tokens (the patch grid)"),
    honoured("text_config.tie_word_embeddings", "the checkpoint decides, as in transformers"),
    honoured("tie_word_embeddings", "the checkpoint decides, as in transformers"),
    honoured("text_config.layer_types", "Gemma 2: which layers slide (Gemma's never do)"),
    honoured("text_config.query_pre_attn_scalar", "Gemma 2's attention scale"),
    honoured("text_config.attn_logit_softcapping", "Gemma 2's attention score soft-cap"),
    honoured("text_config.final_logit_softcapping", "Gemma 2's logit soft-cap"),
    honoured("text_config.sliding_window", "Gemma 2's window on its sliding layers"),
    inert("text_config.cache_implementation", "how transformers stores its cache"),
    inert("num_hidden_layers", "a key PaliGemma 2 releases carry; text_config's is read"),
    inert("vision_config.num_positions", "a key PaliGemma 2 releases carry; the grid decides"),
    *shapes(
        "vision_config.",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_channels",
        "patch_size",
        "image_size",
        "projection_dim",
    ),
    honoured("vision_config.hidden_act", "the vision MLP's activation"),
    honoured("vision_config.layer_norm_eps", "every vision LayerNorm"),
    inert(
        "vision_config.vision_use_head",
        "PaliGemma takes the tower's last hidden state; the pooling head is never called",
    ),
    inert(
        "vision_config.projector_hidden_act",
        "a key the releases carry; PaliGemma's projector is one Linear with no activation",
    ),
    inert(
        "vision_config.vocab_size", "SiglipVisionConfig bookkeeping; the tower has no vocabulary"
    ),
    inert("vision_config.num_image_tokens", "the patch grid decides (image_size/patch_size)²"),
    shapes("", "projection_dim")[0],
    inert("hidden_size", "PaliGemmaConfig's copy of text_config.hidden_size"),
    inert("vocab_size", "PaliGemmaConfig's default; the text model's vocab_size is read"),
    inert("ignore_index", "training only"),
    *token_ids("image_token_index", "image_token_id"),
)
