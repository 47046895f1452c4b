"""What the test suite expects of LLaVA-1.5 (read by tests through the registry)."""

from __future__ import annotations

from mmforge.backend.families._base import Expectations

# No default_config: transformers' default LlavaConfig puts <image> at 32,000, just past
# its 32,000-token text vocabulary (the release's is 32,064), which a converted family
# refuses (bounds.py); tests/backend/test_inspect.py inspects the release's shape instead.
LLAVA = Expectations(
    tiny_tokens={"image_token_id": "<image>"},
    honoured={
        "text_config.hidden_act": "gelu_pytorch_tanh",
        "text_config.rms_norm_eps": 0.05,
        "text_config.rope_parameters.rope_theta": 500.0,
        "vision_config.layer_norm_eps": 0.05,
        "vision_config.hidden_act": "gelu",
        "multimodal_projector_bias": False,
        "vision_feature_layer": -1,
    },
    quantized=("int4",),
    held_out={
        "text_config.intermediate_size": 96,
        "text_config.num_key_value_heads": 1,
        "vision_config.num_hidden_layers": 4,
    },
)

# VipLLaVA: transformers' default VipLlavaConfig has LlavaConfig's vocabulary clash, so no
# default_config either.
VIPLLAVA = Expectations(
    tiny_tokens={"image_token_id": "<image>"},
    honoured={
        "text_config.rms_norm_eps": 0.05,
        "vision_config.layer_norm_eps": 0.05,
        "vision_config.hidden_act": "gelu",
        "projector_layernorm_eps": 0.5,
        "vision_feature_layer": [-1, 1],
    },
    quantized=("int4",),
    held_out={
        "text_config.intermediate_size": 96,
        "text_config.num_key_value_heads": 1,
        "vision_config.num_hidden_layers": 5,
    },
)

# Video-LLaVA: transformers' default VideoLlavaConfig has LlavaConfig's vocabulary clash
# (<image> 32000 past a 32,000-token text vocabulary), so no default_config either.
VIDEO_LLAVA = Expectations(
    tiny_tokens={"image_token_id": "<image>", "video_token_id": "<video>"},
    honoured={
        "text_config.hidden_act": "gelu_pytorch_tanh",
        "text_config.rms_norm_eps": 0.05,
        "vision_config.layer_norm_eps": 0.05,
        "vision_config.hidden_act": "gelu",
        "multimodal_projector_bias": False,
        "vision_feature_layer": -1,
    },
    quantized=("int4",),
    released_rounded=(("video_llava-7b", "int4"),),
    held_out={
        "text_config.intermediate_size": 96,
        "text_config.num_key_value_heads": 1,
        "vision_config.num_hidden_layers": 4,
        "vision_config.intermediate_size": 48,
    },
)

# LLaVA-NeXT: transformers' default LlavaNextConfig has LlavaConfig's vocabulary clash, so
# no default_config either.
LLAVA_NEXT = Expectations(
    tiny_tokens={"image_token_id": "<image>"},
    honoured={
        "text_config.rms_norm_eps": 0.05,
        "vision_config.layer_norm_eps": 0.05,
        "vision_config.hidden_act": "gelu",
        "multimodal_projector_bias": False,
        "vision_feature_layer": -1,
    },
    quantized=("int4",),
    held_out={
        "text_config.intermediate_size": 96,
        "text_config.num_key_value_heads": 1,
        "vision_config.num_hidden_layers": 4,
    },
)
