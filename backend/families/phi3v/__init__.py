"""Phi-3 / Phi-3.5-Vision (`phi3_v`, remote code only), read as data and converted.

The remote layout is mapped onto native parts (`layout.py`: transformers' Phi-3 text model,
a CLIP ViT-L/14-336 tower, the HD transform and its MLP projector). mobius builds the three
graphs (`build.py`); the vision graph gets the HD transform and projector inside a Loop
over images (`hd_graph.py`), as the runtime's `phi3v` pipeline calls it. verify compares
against those native parts with the HD transform restated in torch (`reference.py`,
`model.py`, `preprocess.py`).
"""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._base import (
    Cfg,
    Family,
    Fixtures,
    ImageTokens,
    PackageSpec,
    Profile,
    Projector,
    Recognition,
    Reference,
    processor_op,
)
from mmforge.backend.families.phi3v import build, fields, layout, reference
from mmforge.backend.families.phi3v.preprocess import phi3v_sizing

FIRST_IMAGE_ID = -1


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """The runtime's Phi-3 HD transform (crops of 336 px plus a global view).

    DecodeImage already yields RGB; a ConvertRGB after it would swap red and blue.
    """
    return {
        "processor": {
            "name": "phi_3_image_processor",
            "transforms": [
                processor_op("decode_image", "DecodeImage", {"color_space": "RGB"}),
                processor_op(
                    "phi3_image_transform",
                    "Phi3ImageTransform",
                    {
                        "num_crops": int(pre.get("num_crops", 16)),
                        "num_img_tokens": int(cfg.get("img_processor.num_img_tokens", 144)),
                    },
                ),
            ],
        }
    }


def _past_the_feature_layer(cfg: Cfg) -> tuple[str, ...]:
    """The CLIP parts after the feature layer (-2) and its pooling, which no code runs."""
    tower = layout.TOWER_PREFIX.replace(".", r"\.")
    return (rf"{tower}encoder\.layers\.\d+\.", rf"{tower}post_layernorm\.")


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


def _write_release(folder: Any) -> Any:
    from mmforge.backend.families.phi3v.tiny import write_phi3v

    return write_phi3v(folder)


PHI3V = Family(
    key="phi3v",
    name="Phi-3 / Phi-3.5-Vision",
    pipeline_type="phi3v",
    recognition=Recognition(model_types=("phi3_v",), remote_code_types=("phi3_v",)),
    profile=Profile(
        projector=_projector,
        token_ids=lambda cfg: {},
        image_tokens=_image_tokens,
        fields=fields.PHI3V,
        architecture=_architecture,
        text_placeholder=lambda kind, n: f"<|image_{n}|>" if kind == "image" else "",
        notes=(
            "Defined only as remote code; there is no transformers class for the whole model. "
            "mmforge reads its layout as data and maps it onto native parts (Phi-3, CLIP); "
            "no code from the repository runs.",
            "Prompts write images as <|image_1|>, <|image_2|>, …; the runtime's processor "
            "turns each into that many negative ids (-1, -2, …), so no image token id sits in "
            "the config.",
            "ONNX Runtime GenAI 0.18's Phi3ImageTransform allows 16 crops whatever num_crops "
            "says (measured): an image takes the tokens of HF's processor at num_crops=16, and "
            "the vision graph remakes the global view from the crops as HF does (the runtime's "
            "own is resampled differently).",
            "ONNX Runtime GenAI 0.18 cannot rewind a phi3v generator (RewindTo refuses the "
            "type): every chat turn would prefill afresh.",
        ),
    ),
    package=PackageSpec(
        # The runtime writes image N's placeholders as -N and reads no image token id for
        # phi3v; -1 names the first image's, which verify and validation look for.
        model_fields=lambda cfg: {"image_token_id": FIRST_IMAGE_ID},
        vision_fields=lambda cfg, pre: {},
        vision_inputs={"pixel_values": "pixel_values", "image_sizes": "image_sizes"},
        processor_json=_processor,
        # The released HD canvas, which the runtime's transform keeps as it is.
        picture_sizing=lambda cfg, pre: phi3v_sizing(),
        build=build.build,
        dtypes=("f32", "int4", "int8"),
        unused_ok=_past_the_feature_layer,
        notes=(
            "config.json is read as data (remote-code layout); no code from the repository runs.",
        ),
    ),
    reference=Reference(
        prepare=reference.prepare,
        from_runtime=reference.from_runtime,
        load=reference.load,
        kind=reference.KIND,
        hf_pixels=reference.pixels_at_runtime_budget,
        placeholder_layout=reference.placeholder_layout,
        preprocessing_note=reference.PREPROCESSING_NOTE,
    ),
    fixtures=Fixtures(remote_release=_write_release),
)

FAMILIES = (PHI3V,)
