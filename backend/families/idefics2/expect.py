"""What the test suite expects of Idefics2 (read by tests through the registry)."""

from __future__ import annotations

from mmforge.backend.families._base import Expectations

# No default_config: transformers' default Idefics2Config puts <image> at 32,001, past its
# default Mistral's 32,000-token vocabulary (the release's is 32,003), which a converted
# family refuses (bounds.py), as LLaVA's does.
IDEFICS2 = Expectations(
    tiny_tokens={"image_token_id": "<image>"},
    honoured={
        "text_config.rms_norm_eps": 0.05,
        "text_config.rope_parameters.rope_theta": 500.0,
        "vision_config.layer_norm_eps": 0.05,
        "vision_config.hidden_act": "gelu",
        "vision_config.image_size": 84,
        "perceiver_config.rms_norm_eps": 0.05,
        "perceiver_config.hidden_act": "gelu_pytorch_tanh",
        "text_config.hidden_act": "gelu_pytorch_tanh",
        "text_config.sliding_window": 16,  # the prompt is longer: the window bounds it
    },
    quantized=("int4",),
    held_out={
        "text_config.intermediate_size": 96,
        "text_config.num_key_value_heads": 1,
        "vision_config.num_hidden_layers": 3,
        "perceiver_config.resampler_depth": 3,
    },
)
