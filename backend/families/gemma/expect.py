"""What the test suite expects of Gemma 3 and Gemma 4 (read by tests through the registry)."""

from __future__ import annotations

from mmforge.backend.families._base import DefaultConfig, Expectations

GEMMA3 = Expectations(
    held_out={"text_config.intermediate_size": 96, "text_config.num_key_value_heads": 1},
    default_config=DefaultConfig(
        "Gemma3Config",
        "Gemma3MultiModalProjector",
        {"image_token_id": 262144, "boi_token_id": 255999, "eoi_token_id": 256000},
    ),
    tiny_tokens={"image_token_id": "<image_soft_token>", "boi_token_id": "<start_of_image>"},
    honoured={
        "text_config.hidden_activation": "silu",
        "text_config.rope_parameters.sliding_attention.rope_theta": 50.0,
        "text_config.query_pre_attn_scalar": 64,
        "text_config.sliding_window": 3,
        "text_config.layer_types": ["full_attention", "sliding_attention"],
        "vision_config.layer_norm_eps": 0.05,
    },
    quantized=("int4", "int8"),
)

_GEMMA4_IDS = {
    "image_token_id": 258880,
    "boi_token_id": 255999,
    "audio_token_id": 258881,
    "eoa_token_id": 258883,
}
# transformers' default Gemma4Config has no vision or audio config: a text-only model.
GEMMA4_DEFAULT = DefaultConfig(
    "Gemma4Config", "Gemma4MultimodalEmbedder", _GEMMA4_IDS, components=("embedding", "decoder")
)

GEMMA4 = Expectations(
    held_out={"text_config.intermediate_size": 96, "text_config.num_key_value_heads": 1},
    default_config=GEMMA4_DEFAULT,
    tiny_components=("vision_encoder", "audio_encoder", "embedding", "decoder"),
    tiny_tokens={
        "image_token_id": "<|image|>",
        "boi_token_id": "<|image>",
        "audio_token_id": "<|audio|>",
        "eoa_token_id": "<audio|>",
    },
    honoured={
        "text_config.hidden_activation": "silu",
        "text_config.final_logit_softcapping": 3.0,
        "text_config.sliding_window": 3,
        "text_config.rope_parameters.full_attention.partial_rotary_factor": 0.5,
    },
    # On the tiny checkpoint the int4 decoder meets a near-tie at step 22 (verify rightly
    # AMBIGUOUS at end_to_end); the release-shaped ones give all 32 tokens. The 26B-A4B's
    # is checked with float32 encoders (test_released.py says why).
    released_rounded=(("gemma4", "int4"), ("gemma4-31b", "int4")),
)
