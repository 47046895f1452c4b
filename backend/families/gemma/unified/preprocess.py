"""Gemma4UnifiedImageProcessor's steps in plain torch.

transformers 5.24 implements it on torchvision alone, which cannot be installed beside the
pinned CPU torch. The steps: an aspect-preserving resize to multiples of the merged patch
(patch_size × pooling_kernel_size) within max_soft_tokens merged patches, rescale (and
normalise when asked), cut patch_size patches and merge each k×k group. A merged patch
is laid out (row, column, channel) over its k·p square, which is the patch cut directly
at the merged size, and its position is the merged grid cell; so the patches are cut at
the merged size here.
"""

from __future__ import annotations

import math
from typing import Any

from mmforge.backend.families._hf_image import converts_rgb, normalize, resize, to_uint8_chw

# PIL resample codes -> torch interpolate modes (torchvision's tensor resize).
_MODES = {0: "nearest", 2: "bilinear", 3: "bicubic"}


def target_size(
    height: int, width: int, patch: int, pool: int, soft_tokens: int
) -> tuple[int, int]:
    """The largest multiple-of-merged-patch size within the patch budget, aspect kept."""
    budget = soft_tokens * pool * pool * patch * patch
    factor = math.sqrt(budget / (height * width))
    side = patch * pool
    h = math.floor(factor * height / side) * side
    w = math.floor(factor * width / side) * side
    longest = soft_tokens * side
    if h == 0 and w == 0:
        raise ValueError(f"A {height}x{width} image resizes to nothing")
    if h == 0:
        h, w = side, min(math.floor(width / height) * side, longest)
    elif w == 0:
        h, w = min(math.floor(height / width) * side, longest), side
    return h, w


def preprocess(pre: Any, images: list[Any]) -> dict[str, Any]:
    """pixel_values [N, max_soft_tokens, (k·p)²·3], image_position_ids and token counts."""
    import torch

    patch = int(pre.get("patch_size", 16))
    pool = int(pre.get("pooling_kernel_size", 3))
    soft = int(pre.get("max_soft_tokens", 280))
    side = patch * pool
    mode = _MODES.get(int(pre.get("resample", 3)), "bicubic")
    scale = float(pre.get("rescale_factor", 1 / 255)) if pre.get("do_rescale", True) else 1.0
    mean = list(pre.get("image_mean", [0.0, 0.0, 0.0]))
    std = list(pre.get("image_std", [1.0, 1.0, 1.0]))
    if not pre.get("do_normalize", False):
        mean, std = [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]
    pixels, positions, counts = [], [], []
    for image in images:
        chw = to_uint8_chw(image, converts_rgb(pre))
        h, w = target_size(chw.shape[1], chw.shape[2], patch, pool, soft)
        if (h, w) != (chw.shape[1], chw.shape[2]):
            chw = resize(chw, h, w, mode)
        x = normalize(chw, scale, mean, std)
        rows, cols = h // side, w // side
        cut = x.reshape(3, rows, side, cols, side).permute(1, 3, 2, 4, 0).reshape(rows * cols, -1)
        ys, xs = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
        where = torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=-1)
        n = cut.shape[0]
        counts.append(n)
        pixels.append(torch.nn.functional.pad(cut, (0, 0, 0, soft - n)))
        positions.append(torch.nn.functional.pad(where, (0, 0, 0, soft - n), value=-1))
    return {
        "pixel_values": torch.stack(pixels),
        "image_position_ids": torch.stack(positions),
        "num_soft_tokens_per_image": counts,
    }
