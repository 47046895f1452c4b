"""What the test suite expects of Phi-4-multimodal (read by tests through the registry)."""

from __future__ import annotations

from mmforge.backend.families._base import DefaultConfig, Expectations

PHI4MM = Expectations(
    held_out={"intermediate_size": 96, "num_key_value_heads": 1},
    default_config=DefaultConfig(
        "Phi4MultimodalConfig",
        "MLPMultiModalProjector",
        {"image_token_id": 200010, "audio_token_id": 200011},
        components=("vision_encoder", "audio_encoder", "embedding", "decoder"),
    ),
    tiny_components=("vision_encoder", "audio_encoder", "embedding", "decoder"),
    tiny_tokens={"image_token_id": "<|endoftext10|>", "audio_token_id": "<|endoftext11|>"},
    honoured={
        "hidden_act": "gelu_pytorch_tanh",
        "rope_parameters.partial_rotary_factor": 0.75,
        "vision_config.layer_norm_eps": 0.05,
    },
    # Base weights with a LoRA merged in, native and remote layout.
    released_rounded=(("phi4mm-native", "int4"), ("phi4mm-remote", "int8")),
)
