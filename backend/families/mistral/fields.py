"""Mistral 3 config fields: honoured, checked or inert.

Measured one field at a time by `scripts/field_survey.py`: the text model follows its
activation, norm epsilon, RoPE theta and sliding window; the Pixtral tower follows its
RoPE theta but builds SiLU, the projector builds GELU, and the features come from the
tower's last layer, and the projector has no biases, so other values of those four are
refused.
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

MISTRAL3: tuple[Rule, ...] = (
    # Before COMMON_INERT, which leaves model_type inert: lightonai/LightOnOCR-1B-1025's
    # config.json says model_type mistral3 with a qwen3 text model, and its processor puts
    # no [IMG_BREAK] / [IMG_END] where the runtime always does (see lightonocr.py).
    only(
        "text_config.model_type",
        "mistral",
        "ministral3",
        note="Mistral 3's text models; a qwen3 one is LightOnOCR, which the runtime's "
        "mistral3 framing cannot host (src/models/mistral3_image_processor.cpp, "
        "BuildImageTokenSequence, adds row markers its processor never puts)",
    ),
    *COMMON_INERT,
    *shapes("text_config.", *TEXT_SIZES),
    honoured("text_config.hidden_act", "the decoder MLP's activation (measured)"),
    honoured("text_config.rms_norm_eps", "every decoder RMSNorm (measured)"),
    honoured("text_config.max_position_embeddings", "genai_config context_length"),
    honoured("text_config.rope_parameters.rope_theta", "the decoder's RoPE (measured)"),
    only(
        "text_config.rope_parameters.rope_type",
        "default",
        "yarn",
        note="the decoder builds plain RoPE or YaRN (Ministral 3), not other scaled variants",
    ),
    honoured("text_config.rope_parameters.factor", "YaRN's scaling factor (measured)"),
    honoured("text_config.rope_parameters.original_max_position_embeddings", "YaRN (measured)"),
    honoured("text_config.rope_parameters.beta_fast", "YaRN's ramp (measured)"),
    honoured("text_config.rope_parameters.beta_slow", "YaRN's ramp (measured)"),
    honoured("text_config.rope_parameters.mscale", "YaRN's attention factor (measured)"),
    honoured("text_config.rope_parameters.mscale_all_dim", "YaRN's attention factor (measured)"),
    honoured(
        "text_config.rope_parameters.llama_4_scaling_beta",
        "query scaling past the original context (measured across the boundary)",
    ),
    honoured("text_config.sliding_window", "the decoder's attention window (measured)"),
    honoured("text_config.tie_word_embeddings", "the checkpoint decides, as in transformers"),
    honoured("tie_word_embeddings", "the checkpoint decides, as in transformers"),
    *shapes(
        "vision_config.",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "head_dim",
        "num_channels",
        "patch_size",
    ),
    honoured("vision_config.image_size", "the processor's longest edge when it sets none"),
    honoured(
        "vision_config.hidden_act",
        "the Pixtral MLP's activation (mobius 0.1 fixes SiLU; set per layer; measured)",
    ),
    honoured("vision_config.rope_parameters.rope_theta", "the tower's 2-D RoPE (measured)"),
    inert("vision_config.rope_parameters.rope_type", "Pixtral's RoPE is always 2-D"),
    inert("vision_config.vocab_size", "the vision tower has no vocabulary"),
    only(
        "projector_hidden_act",
        "gelu",
        note="the projector is built with GELU, as released (measured: others FAIL)",
    ),
    only(
        "multimodal_projector_bias",
        False,
        note="the projector is built without biases, as released (measured: True FAILs)",
    ),
    only(
        "vision_feature_layer",
        -1,
        note="the features are the tower's last layer, as released (measured: -2 FAILs)",
    ),
    honoured("spatial_merge_size", "the patch merge and genai_config (measured)"),
    *token_ids("image_token_index"),
)

# Pixtral-12B: model_type llava with a Pixtral tower and a Mistral (Nemo) text model. The
# text and tower rules are Mistral 3's; the top-level fields are LlavaConfig's. The other
# llava checkpoints (CLIP towers, Llama text models) go to the LLaVA entry (families/llava), so
# their fields are refused here by the two model types.
_MISTRAL3_TOP = (
    "projector_hidden_act",
    "multimodal_projector_bias",
    "vision_feature_layer",
    "spatial_merge_size",
    "image_token_index",
)
PIXTRAL_LLAVA: tuple[Rule, ...] = (
    only(
        "vision_config.model_type",
        "pixtral",
        note="Pixtral-12B's tower; llava with a CLIP tower is LLaVA-1.5's entry",
    ),
    only(
        "text_config.model_type",
        "mistral",
        note="Pixtral-12B's text model (Mistral Nemo); a Llama one was not measured",
    ),
    *(r for r in MISTRAL3 if r.path not in (*_MISTRAL3_TOP, "text_config.model_type")),
    only(
        "projector_hidden_act",
        "gelu",
        note="the projector's activation, as released (measured)",
    ),
    honoured(
        "multimodal_projector_bias",
        "the LLaVA projector's two biases (measured with noised biases)",
    ),
    only(
        "vision_feature_layer",
        -1,
        note="the features are the tower's last layer, as released",
    ),
    only(
        "vision_feature_select_strategy",
        "full",
        note="every patch is a feature (Pixtral has no class token to drop)",
    ),
    inert("image_seq_length", "LLaVA-1.5's fixed token count; PixtralProcessor ignores it"),
    inert("ignore_index", "training-only"),
    inert("text_config.is_composition", "transformers 4 bookkeeping"),
    inert("vision_config.is_composition", "transformers 4 bookkeeping"),
    inert("vision_config.tie_word_embeddings", "the vision tower has no vocabulary"),
    # Fields of the LlavaConfig defaults (a CLIP tower, a Llama text model) that only
    # appear when the two model types above are refused already.
    only("vision_config.projection_dim", None, note="a CLIP tower's; Pixtral's has none"),
    only("vision_config.layer_norm_eps", None, note="a CLIP tower's; Pixtral's has none"),
    inert("vision_config.initializer_factor", "initialisation only"),
    inert("text_config.pretraining_tp", "training-only (Llama)"),
    only("text_config.attention_bias", None, False, note="Mistral has no attention biases"),
    only("text_config.mlp_bias", None, False, note="Mistral has no MLP biases"),
    *token_ids("image_token_index"),
)
