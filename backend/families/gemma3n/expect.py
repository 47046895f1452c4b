"""What the test suite expects of Gemma 3n (read by tests through the registry)."""

from __future__ import annotations

from mmforge.backend.families._base import DefaultConfig, Expectations

GEMMA3N = Expectations(
    default_config=DefaultConfig(
        "Gemma3nConfig",
        "Gemma3nMultimodalEmbedder",
        {
            "image_token_id": 262145,
            "audio_token_id": 262273,
            "boi_token_id": 255999,
            "eoi_token_id": 262144,
            "boa_token_id": 256000,
            "eoa_token_id": 262272,
        },
    ),
    tiny_tokens={"image_token_id": "<image_soft_token>", "boi_token_id": "<start_of_image>"},
    honoured={
        "text_config.rms_norm_eps": 0.05,
        "text_config.sliding_window": 3,
        "text_config.final_logit_softcapping": 5.0,
        "text_config.rope_parameters.sliding_attention.rope_theta": 50.0,
        "text_config.altup_correct_scale": False,
        "vision_config.rms_norm_eps": 0.05,
    },
    quantized=("int4",),
    # a list, as Gemma3nTextConfig holds it (one width a layer), the layers of other widths
    held_out={
        "text_config.intermediate_size": [96, 96, 112, 112, 96, 80],
        "text_config.num_key_value_heads": 1,
    },
)
