"""What the test suite expects of Mistral 3 (read by tests through the registry)."""

from __future__ import annotations

from mmforge.backend.families._base import DefaultConfig, Expectations

MISTRAL3 = Expectations(
    held_out={"text_config.intermediate_size": 96, "text_config.num_key_value_heads": 1},
    default_config=DefaultConfig(
        "Mistral3Config", "Mistral3MultiModalProjector", {"image_token_id": 10}
    ),
    tiny_tokens={"image_token_id": "[IMG]"},
    honoured={
        "text_config.hidden_act": "gelu_pytorch_tanh",
        "text_config.rms_norm_eps": 0.05,
        "text_config.sliding_window": 3,
        "vision_config.rope_parameters.rope_theta": 500.0,
        # transformers' default; mobius 0.1 built the Pixtral MLP with a fixed SiLU.
        "vision_config.hidden_act": "gelu",
    },
    quantized=("int4",),
)

# Pixtral-12B (llava with a Pixtral tower): its tiny tower is GELU as released, so SiLU is
# the other value here.
PIXTRAL = Expectations(
    tiny_tokens={"image_token_id": "[IMG]"},
    honoured={
        "text_config.hidden_act": "gelu_pytorch_tanh",
        "text_config.rms_norm_eps": 0.05,
        "text_config.sliding_window": 3,
        "vision_config.rope_parameters.rope_theta": 500.0,
        "vision_config.hidden_act": "silu",
        "multimodal_projector_bias": False,
    },
    quantized=("int4",),
    held_out={"text_config.intermediate_size": 96, "text_config.num_key_value_heads": 1},
)
