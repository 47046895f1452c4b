"""Phi-4-multimodal: the config normalisation mobius needs before the build."""

from __future__ import annotations

from typing import Any


def remote_style_audio_config(hf_config: Any) -> None:
    """Phi-4-multimodal: describe the native config's audio encoder the way mobius reads it.

    mobius 0.1 reads the remote-code `audio_processor.config` block; the native
    transformers config keeps the same sizes in `audio_config` under other names.
    """
    audio = getattr(hf_config, "audio_config", None)
    if audio is None:
        return
    hf_config.audio_processor = {
        "config": {
            "attention_dim": audio.hidden_size,
            "attention_heads": audio.num_attention_heads,
            "num_blocks": audio.num_blocks,
            "linear_units": audio.intermediate_size,
            "kernel_size": audio.kernel_size,
            "input_size": audio.input_size,
            "nemo_conv_settings": {"conv_channels": audio.nemo_conv_channels},
            "relative_attention_bias_args": {"t5_bias_max_distance": audio.bias_max_distance},
        }
    }
    hf_config.embd_layer = {"image_embd_layer": {}, "audio_embd_layer": {}}
