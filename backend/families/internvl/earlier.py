"""InternVL as earlier versions of mmforge converted it: one view a picture, with consent.

Those packages run on ONNX Runtime GenAI's `videochat_flash_qwen` pipeline: a constant
256 ids a picture (one 448 × 448 view, resized by the intake as GotOcr2ImageProcessor
resizes without tiling), an approximation of the release the user agreed to, recorded
in the manifest (`CROP_TO_PATCHES`). Chat runs them from their own files. verify reads
the checkpoint as this family (`Family.earlier`, from the manifest's record), so such a
package is compared with InternVLProcessor run with crop_to_patches false and reported
APPROXIMATE, as then. Nothing converts with it now: its graphs are not listed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.families._base import Approximation, Cfg, Family, ids
from mmforge.backend.families.components.hosts.videochat import sized_pixels, videochat_package
from mmforge.backend.families.internvl.graphs import tokens_per_image, view_size
from mmforge.backend.picture_sizing import FIXED, Sizing, resample_name

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]

CROP_TO_PATCHES = Approximation(
    what="Each picture is seen whole, as one 448 × 448 view, where this model as released "
    "also cuts larger or oblong pictures into up to 12 tiles, so its answers may differ "
    "from the original's, most on small print and fine detail. Near-square pictures up to "
    "about 634 × 634 pixels are seen the same either way.",
    short="each picture seen whole, not cut into tiles",
    overrides={"crop_to_patches": False},
)


def _sizing(cfg: Cfg, pre: Cfg) -> Sizing:
    side = view_size(cfg)
    return Sizing(FIXED, resample_name(pre.get("resample"), "bicubic"), width=side, height=side)


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    side = view_size(cfg)
    return sized_pixels("internvl_image_processor", (side, side), pre, IMAGENET_MEAN, IMAGENET_STD)


def _tokens(cfg: Cfg) -> dict[str, int]:
    return ids(cfg, image_token_id="image_token_id")


def earlier(family: Family) -> Family:
    """`family` (InternVL now) as its packages of one view a picture were converted."""
    return dataclasses.replace(
        family,
        pipeline_type="videochat_flash_qwen",
        package=videochat_package(
            tokens_per_image, _tokens, processor_json=_processor, picture_sizing=_sizing
        ),
        approximation=CROP_TO_PATCHES,
        earlier=None,
    )
