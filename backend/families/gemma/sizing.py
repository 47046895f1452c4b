"""Gemma 4's picture sizing, shared by Gemma 4 and its unified variant (unified/)."""

from __future__ import annotations

from mmforge.backend.families._base import Cfg
from mmforge.backend.picture_sizing import ASPECT_BUDGET, Sizing, resample_name


def gemma4_sizing(cfg: Cfg, pre: Cfg, *, pooled: bool) -> Sizing:
    """Gemma4ImageProcessor's aspect-kept size in whole patch × pooling blocks.

    At most max_soft_tokens blocks. `pooled`: Gemma 4's transformers processor (PIL);
    Gemma 4 unified's is the torchvision one (torch's kernel), with the same rule.
    """
    patch = int(pre.get("patch_size", cfg.get("vision_config.patch_size", 16)))
    pool = int(pre.get("pooling_kernel_size", cfg.get("vision_config.pooling_kernel_size", 3)))
    soft = int(pre.get("max_soft_tokens", 280))
    side = patch * pool
    return Sizing(
        rule=ASPECT_BUDGET,
        resample=resample_name(pre.get("resample"), "bicubic"),
        factor=side,
        max_pixels=soft * side * side,
        longest_edge=soft * side,
        kernel="pil" if pooled else "torch",
    )
