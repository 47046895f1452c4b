"""What the test suite expects of Idefics3 and SmolVLM (read by tests through the registry)."""

from __future__ import annotations

from mmforge.backend.families._base import Expectations

# No default_config: transformers' default Idefics3Config puts <image> at 128,257, past its
# default Llama's 32,000-token vocabulary, which a converted family refuses (bounds.py).
IDEFICS3 = Expectations(
    tiny_tokens={"image_token_id": "<image>"},
    honoured={
        "text_config.rms_norm_eps": 0.05,
        "text_config.rope_parameters.rope_theta": 500.0,
        "text_config.hidden_act": "gelu_pytorch_tanh",
        "vision_config.layer_norm_eps": 0.05,
        "vision_config.hidden_act": "gelu",
    },
    quantized=("int4",),
    held_out={
        "text_config.intermediate_size": 96,
        "text_config.num_key_value_heads": 1,
        "vision_config.num_hidden_layers": 3,
    },
)
