"""Lfm2VlImageProcessor restated with plain torch (transformers 5 needs torchvision)."""

from __future__ import annotations

import math
from typing import Any

from mmforge.backend.families._hf_image import converts_rgb, normalize, resize, to_uint8_chw
from mmforge.backend.picture_sizing import WHOLE_BLOCKS, Sizing


def lfm2_vl_images(images: list[Any], settings: dict[str, Any]) -> dict[str, Any]:
    """Lfm2VlImageProcessor for images it does not split into tiles.

    The runtime never tiles. HF tiles an image only when splitting is on and the image is
    larger than its token budget (times max_pixels_tolerance); such an image raises
    ValueError here, since the two sides then see different inputs by design.
    """
    import torch

    patch = int(settings.get("encoder_patch_size", 16))
    factor = int(settings.get("downsample_factor", 2))
    high = int(settings.get("max_image_tokens", 256))
    mean = settings.get("image_mean", [0.5, 0.5, 0.5])
    std = settings.get("image_std", [0.5, 0.5, 0.5])
    scale = float(settings.get("rescale_factor", 1 / 255))
    tiles = (int(settings.get("min_tiles", 2)), int(settings.get("max_tiles", 10)))
    splitting = bool(settings.get("do_image_splitting", True)) and tiles != (1, 1)
    tile_patches = (int(settings.get("tile_size", 512)) // patch) ** 2 if splitting else 0
    max_patches = max(high * factor * factor, tile_patches)
    sizing = lfm2_sizing(settings)
    pixels, masks, shapes, tokens = [], [], [], []
    for pil in images:
        image = to_uint8_chw(pil, converts_rgb(settings))
        if sizing.tiles(image.shape[-1], image.shape[-2]):
            raise ValueError(
                f"HF splits this {image.shape[-1]}x{image.shape[-2]} image into tiles, which "
                "ONNX Runtime GenAI does not do; compare with a smaller image"
            )
        w, h = sizing.target(image.shape[-1], image.shape[-2])
        image = normalize(resize(image, h, w, "bilinear"), scale, mean, std)
        ph, pw = h // patch, w // patch
        flat = image.reshape(3, ph, patch, pw, patch).permute(1, 3, 2, 4, 0).reshape(ph * pw, -1)
        mask = torch.zeros(max_patches, dtype=torch.int32)
        mask[: ph * pw] = 1
        padded = torch.zeros(max_patches, flat.shape[1])
        padded[: ph * pw] = flat
        pixels.append(padded)
        masks.append(mask)
        shapes.append([ph, pw])
        tokens.append(math.ceil(ph / factor) * math.ceil(pw / factor))
    return {
        "pixel_values": torch.stack(pixels),
        "pixel_attention_mask": torch.stack(masks),
        "spatial_shapes": torch.tensor(shapes, dtype=torch.long),
        "num_tokens": tokens,
    }


def lfm2_sizing(settings: Any) -> Sizing:
    """Lfm2VlImageProcessor's size rule, tiling threshold and kernel (torchvision's)."""
    data = getattr(settings, "data", settings)
    patch = int(data.get("encoder_patch_size") or 16)
    factor = int(data.get("downsample_factor") or 2)
    low = int(data.get("min_image_tokens") or 64)
    high = int(data.get("max_image_tokens") or 256)
    tiles = (int(data.get("min_tiles") or 2), int(data.get("max_tiles") or 10))
    do_split = data.get("do_image_splitting")
    splitting = (True if do_split is None else bool(do_split)) and tiles != (1, 1)
    tolerance = float(data.get("max_pixels_tolerance") or 2.0)
    block = patch * factor
    return Sizing(
        rule=WHOLE_BLOCKS,
        resample="bilinear",
        factor=block,
        min_pixels=low * block * block,
        max_pixels=high * block * block,
        kernel="torch",
        tile_above=int(high * block * block * tolerance) if splitting else 0,
        patch=patch,
    )
