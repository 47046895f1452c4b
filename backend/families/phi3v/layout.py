"""Phi-3 / Phi-3.5-Vision's remote-code layout, read as data, never run.

microsoft/Phi-3-vision-128k-instruct and microsoft/Phi-3.5-vision-instruct exist only as
remote code (`model_type: phi3_v`, `Phi3VForCausalLM`); transformers has no class for
the whole model. Their parts are native classes, though: the text model is transformers'
Phi-3 (`Phi3ForCausalLM`, the same tensor names), the image tower is CLIP ViT-L/14-336
(`CLIPVisionModel`, fixed in the remote code: the config names only its output width),
and what joins them is the HD transform (`glb_GN`, `sub_GN`) and a two-layer MLP
(`img_projection.0` / `.2`). This module maps config.json and the tensor names onto
those parts; reading JSON and safetensors headers runs no code.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

Part = Literal["text", "vision", "projector"]

# The tower the remote code builds (openai/clip-vit-large-patch14-336); config.json names
# only img_processor.image_dim_out. Widths and depth are read from the weights when they
# are at hand.
CLIP_L_336 = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "image_size": 336,
    "patch_size": 14,
    "projection_dim": 768,
    "hidden_act": "quick_gelu",
    "layer_norm_eps": 1e-5,
}
VISION_PREFIX = "model.vision_embed_tokens."
TOWER_PREFIX = VISION_PREFIX + "img_processor.vision_model."
PROJECTOR_NAMES = ("glb_GN", "sub_GN", "img_projection.0.", "img_projection.2.")
# Config keys that belong to the joint model, not to the Phi-3 text model.
_NOT_TEXT = (
    "_name_or_path",
    "architectures",
    "auto_map",
    "embd_layer",
    "img_processor",
    "transformers_version",
    "model_type",
)


def text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The text model's config: transformers' Phi3Config, as a dict."""
    config = {k: v for k, v in raw.items() if k not in _NOT_TEXT}
    config["model_type"] = "phi3"
    scaling = raw.get("rope_scaling")
    if isinstance(scaling, dict):
        # The releases name LongRoPE `su` (transformers 4.38) and keep the original
        # context at the top level; transformers 5 wants both inside the RoPE settings.
        scaling = dict(scaling)
        if scaling.get("type") == "su":
            scaling["type"] = "longrope"
        if "original_max_position_embeddings" in raw:
            scaling.setdefault(
                "original_max_position_embeddings", raw["original_max_position_embeddings"]
            )
        config["rope_scaling"] = scaling
    return config


def vision_config(raw: dict[str, Any], shapes: dict[str, list[int]] | None) -> dict[str, Any]:
    """The image tower's config: transformers' CLIPVisionConfig, as a dict.

    Args:
        raw: config.json as written.
        shapes: The checkpoint's tensor shapes (None: the released tower's sizes).
    """
    config: dict[str, Any] = {**CLIP_L_336, "model_type": "clip_vision_model"}
    shapes = shapes or {}
    patch = shapes.get(TOWER_PREFIX + "embeddings.patch_embedding.weight")
    if patch:
        config["hidden_size"] = int(patch[0])
        config["patch_size"] = int(patch[-1])
    fc1 = shapes.get(TOWER_PREFIX + "encoder.layers.0.mlp.fc1.weight")
    if fc1:
        config["intermediate_size"] = int(fc1[0])
    layers = {
        int(m.group(1))
        for name in shapes
        if (m := re.match(re.escape(TOWER_PREFIX) + r"encoder\.layers\.(\d+)\.", name))
    }
    if layers:
        config["num_hidden_layers"] = max(layers) + 1
    out = (raw.get("img_processor") or {}).get("image_dim_out")
    if out is not None and not patch:
        config["hidden_size"] = int(out)
    return config


def feature_layer(raw: dict[str, Any]) -> int:
    """The tower layer whose output the HD transform takes (remote code: -2 by default)."""
    return int((raw.get("img_processor") or {}).get("layer_idx", -2))


def hd_settings(raw: dict[str, Any]) -> dict[str, Any]:
    """The HD transform as config.json describes it."""
    embd = raw.get("embd_layer") or {}
    image = raw.get("img_processor") or {}
    return {
        "use_hd_transform": bool(embd.get("use_hd_transform", False)),
        "with_learnable_separator": bool(embd.get("with_learnable_separator", False)),
        "hd_transform_order": embd.get("hd_transform_order", "glb_sub"),
        "projection_cls": embd.get("projection_cls", "linear"),
        "num_img_tokens": int(image.get("num_img_tokens", 144)),
        "image_dim_out": int(image.get("image_dim_out", CLIP_L_336["hidden_size"])),
    }


def tensor_part(name: str) -> tuple[Part, str] | None:
    """Which part a remote-layout tensor belongs to, and its name there.

    The text model's names are transformers' Phi3ForCausalLM names as they are; the
    tower's lose their prefix (CLIPVisionModel names); the projector's are kept relative
    to `model.vision_embed_tokens.`. None: a tensor no part uses.
    """
    if name.startswith(TOWER_PREFIX):
        return "vision", name[len(TOWER_PREFIX) :]
    if name.startswith(VISION_PREFIX):
        rest = name[len(VISION_PREFIX) :]
        if rest.startswith(PROJECTOR_NAMES):
            return "projector", rest
        return None
    if name.startswith(("model.", "lm_head.")):
        return "text", name
    return None


def remote_name(part: Part, name: str) -> str:
    """The inverse of `tensor_part`: a part's tensor name in the remote layout."""
    if part == "vision":
        return TOWER_PREFIX + name
    if part == "projector":
        return VISION_PREFIX + name
    return name


def tokens_per_image(rows: int, cols: int, per_crop: int = 144) -> int:
    """Image tokens for an HD grid of rows×cols 336px crops (the remote code's count).

    The crops' merged features with a separator after each row, one global separator,
    then the global view's with a separator after each row: (rows·cols + 1)·144 + 1 +
    (rows + 1)·12 for 144 tokens (12×12) per crop.
    """
    side = math.isqrt(per_crop)
    return (rows * cols + 1) * per_crop + 1 + (rows + 1) * side
