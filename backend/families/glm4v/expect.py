"""What the test suite expects of GLM-4.1V and GLM-4.5V (read by tests through the registry)."""

from __future__ import annotations

from mmforge.backend.families._base import DefaultConfig, Expectations

GLM4V = Expectations(
    default_config=DefaultConfig(
        "Glm4vConfig",
        "Glm4vVisionPatchMerger",
        {"image_token_id": 151343, "image_start_token_id": 151339},
        ("vision_encoder", "embedding", "decoder"),
    ),
    tiny_tokens={"image_token_id": "<|image|>", "image_start_token_id": "<|begin_of_image|>"},
    honoured={
        "text_config.rms_norm_eps": 0.05,
        "text_config.rope_parameters.rope_theta": 500.0,
        "text_config.rope_parameters.partial_rotary_factor": 1.0,
        "text_config.rope_parameters.mrope_section": [4, 6, 6],
        "vision_config.rms_norm_eps": 0.05,
        "vision_config.attention_bias": True,
        "vision_config.rope_parameters.rope_theta": 100.0,
    },
    quantized=("int4",),
    released_rounded=(("glm4v-9b-thinking", "int4"),),
    held_out={
        "text_config.intermediate_size": 80,
        "text_config.num_key_value_heads": 1,
        "text_config.num_hidden_layers": 3,
        "vision_config.depth": 3,
    },
)

# GLM-4.5V: GLM-4.1V's picture path with the GLM-4.5 mixture-of-experts decoder.
GLM4V_MOE = Expectations(
    default_config=DefaultConfig(
        "Glm4vMoeConfig",
        "Glm4vVisionPatchMerger",
        {"image_token_id": 151363, "image_start_token_id": 151339},
        ("vision_encoder", "embedding", "decoder"),
        # transformers' default is 4096 wide over 96 heads with no head_dim, which
        # bounds.py refuses; GLM-4.5V's release says head_dim 128.
        config_kwargs={"text_config": {"head_dim": 128}},
    ),
    tiny_tokens={"image_token_id": "<|image|>", "image_start_token_id": "<|begin_of_image|>"},
    honoured={
        "text_config.rms_norm_eps": 0.05,
        "text_config.rope_parameters.rope_theta": 500.0,
        "text_config.num_experts_per_tok": 2,
        "text_config.routed_scaling_factor": 1.0,
        "text_config.n_group": 2,
        "text_config.topk_group": 1,
        "text_config.first_k_dense_replace": 2,
        "text_config.norm_topk_prob": False,
        "vision_config.rms_norm_eps": 0.05,
    },
    quantized=("int4",),
    released_rounded=(("glm4v_moe-106b-a12b", "int4"),),
    held_out={
        "text_config.hidden_size": 48,
        "text_config.head_dim": 20,
        "text_config.rope_parameters.mrope_section": [1, 2, 2],
        "text_config.moe_intermediate_size": 16,
        "text_config.n_routed_experts": 6,
        "text_config.n_group": 3,
        "text_config.topk_group": 2,
        "text_config.num_experts_per_tok": 2,
        "text_config.num_key_value_heads": 1,
        "text_config.num_hidden_layers": 4,
        "text_config.first_k_dense_replace": 2,
        "vision_config.out_hidden_size": 48,
        "vision_config.depth": 3,
    },
)
