"""Mistral 3 (Pixtral vision tower)."""

from __future__ import annotations

import math
from typing import Any

from mmforge.backend.families._base import (
    CLIP_MEAN,
    CLIP_STD,
    Cfg,
    Family,
    Fixtures,
    ImageTokens,
    PackageSpec,
    Profile,
    Projector,
    Recognition,
    Reference,
    as_int,
    ids,
    image_sizes_pipeline,
    rescale_and_normalize,
)
from mmforge.backend.families._embedding import text_embedding_without_features
from mmforge.backend.families.mistral import expect, fields, lightonocr, pixtral, reference, tiny
from mmforge.backend.families.mistral.build import vision_activation
from mmforge.backend.families.mistral.graph_fixes import pixtral_rope_any_grid
from mmforge.backend.families.mistral.reference import merge_size
from mmforge.backend.picture_sizing import LONGEST_EDGE, Sizing, resample_name


def _projector(cfg: Cfg) -> Projector:
    merge = merge_size(cfg)
    act = cfg.get("projector_hidden_act", "gelu")
    return Projector(
        "Mistral3MultiModalProjector",
        "RMSNorm → spatial merge → Linear → GELU → Linear",
        f"model_type mistral3 with spatial_merge_size={merge}: RMSNorm, a {merge}×{merge} "
        f"patch merge, then Linear → {act.upper()} → Linear",
        {"spatial_merge_size": merge, "projector_hidden_act": act},
    )


def _image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    patch = as_int(
        pre.first(
            "patch_size.height", "patch_size", default=cfg.get("vision_config.patch_size", 14)
        )
    )
    merge = merge_size(cfg)
    edge = int(pre.first("size.longest_edge", default=cfg.get("vision_config.image_size", 1540)))
    side = math.ceil(edge / (patch * merge))
    return ImageTokens(
        minimum=2,
        maximum=side * side + side,
        rule=f"rows × cols of {patch * merge}px blocks (longest edge ≤ {edge}px), plus one "
        "[IMG_BREAK]/[IMG_END] per row",
    )


def _patch(cfg: Cfg, pre: Cfg) -> int:
    return as_int(
        pre.first(
            "patch_size.height", "patch_size", default=cfg.get("vision_config.patch_size", 14)
        )
    )


def _vision_fields(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    # The runtime reads patch_size from genai_config, not from the processor JSON, and
    # defaults it to 14 (ORT GenAI 0.18).
    return {
        "patch_size": _patch(cfg, pre),
        "spatial_merge_size": merge_size(cfg),
    }


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """The runtime's Pixtral pipeline, with the checkpoint's normalisation.

    DecodeImage already yields RGB: adding ConvertRGB would swap red and blue (mobius 0.1
    does that). The runtime resizes Qwen-style within a pixel budget; the budget is the
    square of HF's longest edge.
    """
    block = _patch(cfg, pre) * merge_size(cfg)
    edge = int(pre.first("size.longest_edge", default=cfg.get("vision_config.image_size", 1540)))
    return image_sizes_pipeline(
        "pixtral_image_processor",
        min_pixels=block * block,
        max_pixels=edge * edge,
        patch=_patch(cfg, pre),
        merge=merge_size(cfg),
        interpolation="CUBIC",
        normalize=rescale_and_normalize(pre, CLIP_MEAN, CLIP_STD),
    )


def _sizing(cfg: Cfg, pre: Cfg) -> Sizing:
    """PixtralImageProcessor's longest-edge rule in blocks of patch × merge.

    The runtime resizes within the pixel budget `_processor` writes; a picture already
    at Pixtral's size is a multiple of the block within that budget, which it keeps.
    """
    block = _patch(cfg, pre) * merge_size(cfg)
    edge = int(pre.first("size.longest_edge", default=cfg.get("vision_config.image_size", 1540)))
    return Sizing(
        rule=LONGEST_EDGE,
        resample=resample_name(pre.get("resample"), "bicubic"),
        factor=block,
        min_pixels=block * block,
        max_pixels=edge * edge,
        longest_edge=edge,
    )


MISTRAL3_PACKAGE = PackageSpec(
    model_fields=lambda cfg: ids(cfg, image_token_id=("image_token_index", "image_token_id")),
    vision_fields=_vision_fields,
    vision_inputs={"pixel_values": "pixel_values"},
    processor_json=_processor,
    picture_sizing=_sizing,
    graph_fixes=(pixtral_rope_any_grid, text_embedding_without_features),
    module_patch=vision_activation,
    # mobius 0.1's GroupQueryAttention path drops Ministral 3's position-dependent query
    # scaling (llama_4_scaling_beta): past the original context its logits went wrong.
    # The portable graph applies it and matches HF on both sides of the boundary.
    fused_attention=lambda cfg: cfg.get("text_config.rope_parameters.llama_4_scaling_beta") is None,
    notes=(
        "genai_config carries model.vision.patch_size (the runtime defaults to 14).",
        "No ConvertRGB after DecodeImage (it would swap red and blue).",
        "The runtime resizes within a pixel budget instead of HF's longest-edge rule, so "
        "its pixels differ from HF's by design; vision parity uses the runtime's pixels.",
    ),
)

MISTRAL3 = Family(
    key="mistral3",
    name="Mistral 3",
    pipeline_type="mistral3",
    recognition=Recognition(model_types=("mistral3",)),
    profile=Profile(
        projector=_projector,
        token_ids=lambda cfg: ids(
            cfg,
            image_token_id=("image_token_index", "image_token_id"),
            image_break_token_id=("image_break_token_id",),
            image_end_token_id=("image_end_token_id",),
        ),
        image_tokens=_image_tokens,
        hf_class="Mistral3ForConditionalGeneration",
        runtime_token_strings=("[IMG]", "[IMG_BREAK]", "[IMG_END]", "[INST]"),
        fields=fields.MISTRAL3,
        text_placeholder=lambda kind, n: "[IMG]",
        notes=(
            "The runtime resizes Qwen-style (multiples of patch·merge within a pixel budget), "
            "not with Pixtral's longest-edge rule: the vision encoder must take any patch grid.",
            "genai_config must carry model.vision.patch_size; the runtime defaults to 14.",
        ),
    ),
    package=MISTRAL3_PACKAGE,
    reference=Reference(
        prepare=reference.prepare,
        from_runtime=reference.from_runtime,
        hf_pixels=reference.pixels_at_runtime_size,
        placeholder_layout=reference.placeholder_layout,
        preprocessing_note=(
            "Mistral 3: the runtime sizes pictures by a pixel budget and HF by the longest "
            "edge; mmforge hands the runtime pictures already at HF's size, which its budget "
            "keeps (a package converted before it recorded that rule is compared at the "
            "runtime's size)"
        ),
    ),
    fixtures=Fixtures(tiny=tiny.MISTRAL3, released=tiny.RELEASED_MISTRAL3, expect=expect.MISTRAL3),
)

# Pixtral-12B (llava with a Pixtral tower) on the same pipeline: pixtral.py. It comes
# before MISTRAL3 so that MISTRAL3 stays the family of `mistral3` packages by pipeline.
PIXTRAL = pixtral.make(MISTRAL3)

FAMILIES = (PIXTRAL, MISTRAL3, lightonocr.LIGHTONOCR)
