"""What the test suite expects of the Qwen entries (read by tests through the registry)."""

from __future__ import annotations

from mmforge.backend.families._base import DefaultConfig, Expectations

_QWEN_IDS = {"image_token_id": 151655, "vision_start_token_id": 151652}

QWEN2_5_VL = Expectations(
    held_out={"text_config.intermediate_size": 96, "text_config.num_key_value_heads": 1},
    default_config=DefaultConfig(
        "Qwen2_5_VLConfig", "PatchMerger", {**_QWEN_IDS, "video_token_id": 151656}
    ),
    tiny_tokens={"image_token_id": "<|image_pad|>", "vision_start_token_id": "<|vision_start|>"},
    honoured={
        "text_config.hidden_act": "gelu_pytorch_tanh",
        "text_config.rms_norm_eps": 0.05,
        "text_config.rope_parameters.rope_theta": 500.0,
        "text_config.rope_parameters.mrope_section": [4, 2, 2],
        "vision_config.window_size": 28,
        "vision_config.fullatt_block_indexes": [0],
    },
    quantized=("int4",),
)

QWEN2_VL = Expectations(
    held_out={
        "text_config.hidden_size": 96,
        "text_config.num_attention_heads": 6,
        "text_config.num_key_value_heads": 3,
        "text_config.num_hidden_layers": 3,
        "text_config.layer_types": ["full_attention"] * 3,
        "text_config.intermediate_size": 160,
        "text_config.rope_parameters.mrope_section": [2, 2, 4],
        "vision_config.embed_dim": 48,
        "vision_config.num_heads": 3,
        "vision_config.depth": 3,
        "vision_config.mlp_ratio": 3,
        "vision_config.hidden_size": 96,
        "tie_word_embeddings": True,
        "text_config.tie_word_embeddings": True,
    },
    default_config=DefaultConfig(
        "Qwen2VLConfig", "PatchMerger", {**_QWEN_IDS, "video_token_id": 151656}
    ),
    tiny_tokens={"image_token_id": "<|image_pad|>", "vision_start_token_id": "<|vision_start|>"},
    honoured={
        "text_config.hidden_act": "gelu_pytorch_tanh",
        "text_config.rms_norm_eps": 0.05,
        "text_config.rope_parameters.rope_theta": 500.0,
        "text_config.rope_parameters.mrope_section": [4, 2, 2],
        "vision_config.mlp_ratio": 3,
    },
    quantized=("int4",),
    released_rounded=(("qwen2_vl-2b", "int4"),),
)

QWEN3_VL = Expectations(
    held_out={"text_config.intermediate_size": 96, "text_config.num_key_value_heads": 1},
    default_config=DefaultConfig("Qwen3VLConfig", "PatchMerger", _QWEN_IDS),
    tiny_tokens={"image_token_id": "<|image_pad|>"},
    honoured={
        "text_config.hidden_act": "gelu_pytorch_tanh",
        "text_config.rope_parameters.rope_theta": 500.0,
        "text_config.attention_bias": True,
        "vision_config.deepstack_visual_indexes": [0],
    },
    quantized=("int4",),
)

QWEN3_5 = Expectations(
    held_out={"text_config.intermediate_size": 96, "text_config.num_key_value_heads": 1},
    default_config=DefaultConfig("Qwen3_5Config", "PatchMerger", {"image_token_id": 248056}),
    tiny_tokens={"image_token_id": "<|image_pad|>"},
    honoured={
        "text_config.rms_norm_eps": 0.05,
        "text_config.rope_parameters.rope_theta": 500.0,
        "text_config.rope_parameters.partial_rotary_factor": 0.5,
        "text_config.rope_parameters.mrope_section": [4, 2, 2],
        "text_config.attention_bias": True,
        "text_config.layer_types": [
            "full_attention",
            "linear_attention",
            "full_attention",
            "linear_attention",
            "linear_attention",
        ],
    },
    quantized=("int4", "int8"),
)

QWEN3_5_MOE = Expectations(
    held_out={"text_config.num_key_value_heads": 1, "text_config.num_experts": 6},
    default_config=DefaultConfig("Qwen3_5MoeConfig", "PatchMerger", {"image_token_id": 248056}),
    tiny_tokens={"image_token_id": "<|image_pad|>"},
    honoured={
        "text_config.num_experts_per_tok": 3,
        "text_config.rms_norm_eps": 0.05,
        "text_config.layer_types": [
            "linear_attention",
            "linear_attention",
            "full_attention",
            "linear_attention",
            "full_attention",
        ],
    },
    quantized=("int4",),
)

# Qwen3-VL MoE's tiny checkpoint: layer 1 sparse, 0 and 2 dense; 3 of 6 experts per token
# under the honoured fields.
QWEN3_VL_MOE = Expectations(
    default_config=DefaultConfig("Qwen3VLMoeConfig", "PatchMerger", _QWEN_IDS),
    tiny_tokens={"image_token_id": "<|image_pad|>"},
    honoured={
        "text_config.num_experts_per_tok": 3,
        "text_config.decoder_sparse_step": 2,
        "text_config.mlp_only_layers": [0, 2],
    },
    quantized=("int4",),
    # Experts stored transposed ([E, H, 2I]), as the releases store them; the 235B-A22B's
    # proportions (query twice the hidden width, 16 query heads per KV head) at int4 too.
    released_rounded=(("qwen3_vl_moe-30b-a3b", "int4"), ("qwen3_vl_moe-235b-a22b", "int4")),
    held_out={"text_config.num_key_value_heads": 1, "text_config.num_experts": 5},
)
