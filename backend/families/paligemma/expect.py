"""What the test suite expects of PaliGemma (read by tests through the registry)."""

from __future__ import annotations

from mmforge.backend.families._base import DefaultConfig, Expectations

PALIGEMMA = Expectations(
    default_config=DefaultConfig(
        "PaliGemmaConfig", "LinearMultiModalProjector", {"image_token_id": 256000}
    ),
    tiny_tokens={"image_token_id": "<image>"},
    honoured={
        "text_config.rms_norm_eps": 0.05,
        "text_config.rope_parameters.rope_theta": 100.0,
        "vision_config.layer_norm_eps": 0.05,
        "vision_config.hidden_act": "gelu",
        "text_config.hidden_act": "gelu",
    },
    quantized=("int4",),
    one_message=True,
    held_out={"text_config.intermediate_size": 96, "text_config.num_key_value_heads": 1},
)
