"""Phi-3 / Phi-3.5-Vision (`phi3_v`, remote code only): the layout mapped, conversion refused.

What is solid: the remote layout read as data and mapped onto native parts (`layout.py`:
transformers' Phi-3 text model, a CLIP ViT-L/14-336 tower, the HD transform and its MLP
projector), the field table (`fields.py`), inspect's account of it, and release-shaped
test checkpoints (`tiny.py`). What is not: the package. The runtime's `phi3v` pipeline
needs the HD transform inside the vision graph, and the graph builder leaves it out
(`NOT_CONVERTED`, measured).
"""

from __future__ import annotations

from mmforge.backend.families._base import Cfg, Family, ImageTokens, Projector
from mmforge.backend.families.phi3v import fields, layout

NOT_CONVERTED = (
    "its vision graph is not built yet. mobius-onnx 0.1 builds Phi-3.5-Vision's vision "
    "model as the bare CLIP tower (measured: pixel_values [crops, 3, 336, 336] in, "
    "[crops, 576, image_dim_out] out, no image_sizes input) and leaves the HD transform "
    "(2×2 merge, glb_GN/sub_GN separators) and the MLP projector to host code, which "
    "ONNX Runtime GenAI cannot call: its phi3v pipeline feeds the vision model "
    "pixel_values [images, 1+crops, 3, 336, 336] and image_sizes, and needs the projected "
    "features [image tokens, hidden_size] back"
)


def _projector(cfg: Cfg) -> Projector:
    hd = layout.hd_settings(dict(cfg.data))
    width = 4 * hd["image_dim_out"]
    hidden = cfg.get("hidden_size")
    return Projector(
        "MLPMultiModalProjector",
        "HD transform (2×2 merge, learnable separators) → Linear → GELU → Linear",
        f"embd_layer.projection_cls={hd['projection_cls']!r} with use_hd_transform="
        f"{hd['use_hd_transform']}: each crop's 24×24 CLIP patches merge 2×2 into "
        f"{width}-wide features (4×image_dim_out), then a two-layer MLP maps them to "
        f"hidden_size={hidden}",
        {
            "embd_layer.projection_cls": hd["projection_cls"],
            "embd_layer.hd_transform_order": hd["hd_transform_order"],
            "img_processor.image_dim_out": hd["image_dim_out"],
        },
    )


def _image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    crops = int(pre.get("num_crops", 16))
    per_crop = int(cfg.get("img_processor.num_img_tokens", 144))
    return ImageTokens(
        minimum=layout.tokens_per_image(1, 1, per_crop),
        maximum=layout.tokens_per_image(crops, 1, per_crop),
        rule=f"HD transform: up to num_crops={crops} crops of 336 px plus a global view, "
        f"{per_crop} tokens each, a separator after each row of 12 and one between "
        "(rows·cols + 1)·144 + 1 + (rows + 1)·12",
    )


def _architecture(cfg: Cfg) -> tuple[str, ...]:
    raw = dict(cfg.data)
    text = layout.text_config(raw)
    tower = layout.vision_config(raw, None)
    scaling = (raw.get("rope_scaling") or {}).get("type") or "none"
    return (
        "Layout (remote code, read as data): text model = transformers' Phi-3 "
        f"({text.get('num_hidden_layers')} layers, hidden {text.get('hidden_size')}, "
        f"RoPE scaling {scaling}), same tensor names; image tower = CLIP ViT-L/14-336 "
        f"(width {tower['hidden_size']}, features from layer {layout.feature_layer(raw)}, "
        "class token dropped) under model.vision_embed_tokens.img_processor.vision_model.; "
        "HD separators glb_GN / sub_GN and img_projection.0/.2 under "
        "model.vision_embed_tokens.",
    )


PHI3V = Family(
    key="phi3v",
    name="Phi-3 / Phi-3.5-Vision",
    model_types=("phi3_v",),
    remote_code_types=("phi3_v",),
    pipeline_type="phi3v",
    projector=_projector,
    token_ids=lambda cfg: {},
    image_tokens=_image_tokens,
    fields=fields.PHI3V,
    architecture=_architecture,
    not_converted=NOT_CONVERTED,
    text_placeholder=lambda kind, n: f"<|image_{n}|>" if kind == "image" else "",
    notes=(
        "Defined only as remote code; there is no transformers class for the whole model. "
        "mmforge reads its layout as data and maps it onto native parts (Phi-3, CLIP); "
        "no code from the repository runs.",
        "Prompts write images as <|image_1|>, <|image_2|>, …; the runtime's processor "
        "turns each into that many negative ids (-1, -2, …), so no image token id sits in "
        "the config.",
        "ONNX Runtime GenAI 0.18 cannot rewind a phi3v generator (RewindTo refuses the "
        "type): every chat turn would prefill afresh.",
    ),
)

FAMILIES = (PHI3V,)
