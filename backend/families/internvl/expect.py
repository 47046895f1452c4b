"""What the test suite expects of InternVL 3 / 3.5 (read by tests through the registry)."""

from __future__ import annotations

from mmforge.backend.families._base import DefaultConfig, Expectations

INTERNVL = Expectations(
    # transformers' default InternVLConfig: InternVL3-1B's shape (Qwen2 text, <IMG_CONTEXT>
    # at 151667 within its 151,936-token vocabulary).
    default_config=DefaultConfig(
        "InternVLConfig", "MLPMultiModalProjector", {"image_token_id": 151667}
    ),
    tiny_tokens={"image_token_id": "<IMG_CONTEXT>"},
    honoured={
        "text_config.rms_norm_eps": 0.05,
        "text_config.rope_parameters.rope_theta": 500.0,
        "text_config.hidden_act": "gelu_pytorch_tanh",
        "vision_config.layer_norm_eps": 0.05,
        "vision_config.attention_bias": False,
        "vision_config.use_qk_norm": True,
        "vision_config.norm_type": "rms_norm",
        "vision_config.use_mean_pooling": False,
        "vision_config.hidden_act": "gelu_pytorch_tanh",
        "projector_hidden_act": "silu",
        "vision_feature_layer": -2,
    },
    quantized=("int4",),
    held_out={
        "text_config.intermediate_size": 96,
        "text_config.num_key_value_heads": 1,
        "vision_config.num_hidden_layers": 3,
        "vision_config.intermediate_size": 48,
    },
)
