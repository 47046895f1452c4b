"""What the test suite expects of LFM2-VL (read by tests through the registry)."""

from __future__ import annotations

from mmforge.backend.families._base import DefaultConfig, Expectations

LFM2_VL = Expectations(
    held_out={"text_config.intermediate_size": 96, "text_config.num_key_value_heads": 1},
    default_config=DefaultConfig("Lfm2VlConfig", "MLPMultiModalProjector", {"image_token_id": 396}),
    tiny_tokens={"image_token_id": "<image>"},
    honoured={
        "text_config.norm_eps": 0.05,
        "text_config.conv_bias": True,
        "projector_use_layernorm": False,
        "vision_config.hidden_act": "gelu",
    },
    # ONNX Runtime GenAI's builder writes the decoder, q/k/v fused under one name.
    released_rounded=(("lfm2_vl-450m", "int4"),),
)
