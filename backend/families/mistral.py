"""Mistral 3 (Pixtral vision tower)."""

from __future__ import annotations

import math

from mmforge.backend.families._base import Cfg, Family, ImageTokens, Projector, as_int, ids


def _projector(cfg: Cfg) -> Projector:
    merge = cfg.get("spatial_merge_size", 2)
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
    merge = int(cfg.get("spatial_merge_size", 2))
    edge = int(pre.first("size.longest_edge", default=cfg.get("vision_config.image_size", 1540)))
    side = math.ceil(edge / (patch * merge))
    return ImageTokens(
        minimum=2,
        maximum=side * side + side,
        rule=f"rows × cols of {patch * merge}px blocks (longest edge ≤ {edge}px), plus one "
        "[IMG_BREAK]/[IMG_END] per row",
    )


MISTRAL3 = Family(
    key="mistral3",
    name="Mistral 3",
    model_types=("mistral3",),
    pipeline_type="mistral3",
    hf_class="Mistral3ForConditionalGeneration",
    projector=_projector,
    token_ids=lambda cfg: ids(
        cfg,
        image_token_id=("image_token_index", "image_token_id"),
        image_break_token_id=("image_break_token_id",),
        image_end_token_id=("image_end_token_id",),
    ),
    image_tokens=_image_tokens,
    runtime_token_strings=("[IMG]", "[IMG_BREAK]", "[IMG_END]", "[INST]"),
    notes=(
        "The runtime resizes Qwen-style (multiples of patch·merge within a pixel budget), "
        "not with Pixtral's longest-edge rule: the vision encoder must take any patch grid.",
        "genai_config must carry model.vision.patch_size; the runtime defaults to 14.",
    ),
)

FAMILIES = (MISTRAL3,)
