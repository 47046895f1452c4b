"""Phi-4-multimodal's remote-code layout, read as data, never run.

The released main revision of microsoft/Phi-4-multimodal-instruct is the remote-code
layout (`model_type: phi4mm`): its config describes the audio encoder under
`audio_processor.config` in the original project's names, the image encoder under
`embd_layer` (its SigLIP tower's sizes are fixed in the remote code), and the LoRA
adapters under `vision_lora` / `speech_lora`; its weights wrap each adapted projection
(`<module>.base_layer.weight` beside `lora_A.vision`, ...) and name the audio blocks
as that project did. Reading safetensors and JSON runs no code, so this module maps the
layout to transformers' native Phi-4-multimodal: the config here, the tensor names for
verify's HF model (`native_tensor_name`), the processors' class names.
"""

from __future__ import annotations

import math
import re
from typing import Any

REMOTE_TYPE = "phi4mm"

# The image tower the remote code builds (SigLIP so400m at 448 px); its config names none
# of these. Widths and depth are read from the weights when they are at hand.
_SIGLIP = {
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "image_size": 448,
    "patch_size": 14,
}
_TOWER = "model.embed_tokens_extend.image_embed.img_processor."

# Processor classes the remote layout names, and transformers' native ones.
PROCESSOR_CLASSES = {
    "Phi4MMAudioFeatureExtractor": "Phi4MultimodalFeatureExtractor",
    "Phi4MMImageProcessor": "Phi4MultimodalImageProcessor",
}

# Native transformers names and the remote-code ones (what mobius 0.1 maps, and what the
# released main revision holds).
_RENAMES = (
    (".image_embed.global_img_feature_extensor", ".image_embed.glb_GN"),
    (".image_embed.sub_img_feature_extensor", ".image_embed.sub_GN"),
    (".image_embed.img_projection_up.", ".image_embed.img_projection.0."),
    (".image_embed.img_projection_down.", ".image_embed.img_projection.2."),
    (".audio_embed.up_proj_for_speech.", ".audio_embed.audio_projection.speech.0."),
    (".audio_embed.down_proj_for_speech.", ".audio_embed.audio_projection.speech.2."),
    (".audio_embed.up_proj_for_vision_speech.", ".audio_embed.audio_projection.vision.0."),
    (".audio_embed.down_proj_for_vision_speech.", ".audio_embed.audio_projection.vision.2."),
)
_AUDIO_BLOCK_RENAMES = (  # inside .audio_embed.encoder.encoders.N.
    (".gate_up_proj.", ".net.0.linear."),
    (".down_proj.", ".net.2."),
    (".self_attn.q_proj.", ".self_attn.linear_q."),
    (".self_attn.k_proj.", ".self_attn.linear_k."),
    (".self_attn.v_proj.", ".self_attn.linear_v."),
    (".self_attn.o_proj.", ".self_attn.linear_out."),
)
_AUDIO_BLOCKS = ".audio_embed.encoder.encoders."


def is_remote(config: dict[str, Any]) -> bool:
    """Whether a config is the remote-code layout."""
    return config.get("model_type") == REMOTE_TYPE


def native_config(raw: dict[str, Any], shapes: dict[str, list[int]] | None) -> dict[str, Any]:
    """Transformers' native Phi-4-multimodal config for a remote-code config.

    Args:
        raw: config.json as written (model_type phi4mm).
        shapes: The checkpoint's tensor shapes, for the image tower's sizes (None: the
            released tower's, which the remote code fixes).
    """
    config = {
        k: v
        for k, v in raw.items()
        if k
        not in (
            "_name_or_path",
            "architectures",
            "auto_map",
            "vision_lora",
            "speech_lora",
            "transformers_version",
            "_attn_implementation",
            "embd_layer",
            "audio_processor",
            "img_processor",
        )
    }
    config["model_type"] = "phi4_multimodal"
    embd = raw.get("embd_layer") or {}
    image = embd.get("image_embd_layer") or {}
    audio_layer = embd.get("audio_embd_layer") or {}
    audio = dict((raw.get("audio_processor") or {}).get("config") or {})
    for key in ("activation_checkpointing", "cnn_layer_norm", "input_layer"):
        audio.pop(key, None)
    audio.pop("encoder_embedding_config", None)
    renames = {
        "attention_dim": "hidden_size",
        "attention_heads": "num_attention_heads",
        "linear_units": "intermediate_size",
        "depthwise_seperable_out_channel": "depthwise_separable_out_channel",
    }
    for old, new in renames.items():
        if old in audio:
            audio[new] = audio.pop(old)
    if "nemo_conv_settings" in audio:
        audio["nemo_conv_channels"] = audio.pop("nemo_conv_settings").get("conv_channels")
    if "relative_attention_bias_args" in audio:
        bias = audio.pop("relative_attention_bias_args")
        audio["bias_max_distance"] = bias.get("t5_bias_max_distance")
    if "downsample_rate" in audio_layer:
        audio["downsample_rate"] = audio_layer["downsample_rate"]
    audio["model_type"] = "phi4_multimodal_audio"
    vision: dict[str, Any] = {**_SIGLIP, **_tower_sizes(shapes or {})}
    vision.update({k: image[k] for k in ("crop_size",) if k in image})
    vision["model_type"] = "phi4_multimodal_vision"
    config["audio_config"] = {k: v for k, v in audio.items() if v is not None}
    config["vision_config"] = vision
    return config


def _tower_sizes(shapes: dict[str, list[int]]) -> dict[str, int]:
    """The image tower's width, MLP width and depth, from its weights."""
    sizes: dict[str, int] = {}
    patch = shapes.get(_TOWER + "embeddings.patch_embedding.weight")
    if patch:
        sizes["hidden_size"] = int(patch[0])
        sizes["patch_size"] = int(patch[-1])
    fc1 = shapes.get(_TOWER + "encoder.layers.0.mlp.fc1.weight")
    if fc1:
        sizes["intermediate_size"] = int(fc1[0])
    layers = {
        int(m.group(1))
        for name in shapes
        if (m := re.match(re.escape(_TOWER) + r"encoder\.layers\.(\d+)\.", name))
    }
    if layers:
        sizes["num_hidden_layers"] = max(layers) + 1
    positions = shapes.get(_TOWER + "embeddings.position_embedding.weight")
    if positions and "patch_size" in sizes:
        side = math.isqrt(int(positions[0]))
        sizes["image_size"] = side * sizes["patch_size"]
    if "hidden_size" in sizes and sizes["hidden_size"] % _SIGLIP["num_attention_heads"]:
        sizes["num_attention_heads"] = 1  # a tower narrower than the released heads
    return sizes


def remote_tensor_name(name: str) -> str:
    """A native tensor name in the remote-code layout mobius builds from.

    Remote names pass through unchanged.
    """
    for native, remote in _RENAMES:
        name = name.replace(native, remote)
    if _AUDIO_BLOCKS in name:
        for native, remote in _AUDIO_BLOCK_RENAMES:
            name = name.replace(native, remote)
    return name


def native_tensor_name(name: str) -> str | None:
    """A remote-layout tensor's native name (None: a LoRA tensor, loaded as an adapter)."""
    if ".lora_A." in name or ".lora_B." in name:
        return None
    name = name.replace(".base_layer.", ".")
    for native, remote in _RENAMES:
        name = name.replace(remote, native)
    if _AUDIO_BLOCKS in name:
        for native, remote in _AUDIO_BLOCK_RENAMES:
            name = name.replace(remote, native)
    return name
