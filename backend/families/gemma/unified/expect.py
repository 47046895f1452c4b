"""What the test suite expects of Gemma 4 unified (read by tests through the registry)."""

from __future__ import annotations

import dataclasses

from mmforge.backend.families._base import Expectations
from mmforge.backend.families.gemma.expect import GEMMA4_DEFAULT

GEMMA4_UNIFIED = Expectations(
    held_out={"text_config.intermediate_size": 96, "text_config.num_key_value_heads": 1},
    default_config=dataclasses.replace(
        GEMMA4_DEFAULT, config_class="Gemma4UnifiedConfig", projector="Gemma4UnifiedVisionEmbedder"
    ),
    tiny_components=("vision_encoder", "audio_encoder", "embedding", "decoder"),
    tiny_tokens={"image_token_id": "<|image|>", "audio_token_id": "<|audio|>"},
    # Its text model is Gemma 4's: the same fields, built by the same decoder.
    honoured={
        "text_config.hidden_activation": "silu",
        "text_config.final_logit_softcapping": 3.0,
        "text_config.sliding_window": 3,
    },
    quantized=("int4",),
)
