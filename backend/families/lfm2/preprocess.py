"""Lfm2VlImageProcessor restated with plain torch (transformers 5 needs torchvision)."""

from __future__ import annotations

import math
from typing import Any

from mmforge.backend.families._hf_image import normalize, resize, to_uint8_chw


def lfm2_vl_images(images: list[Any], settings: dict[str, Any]) -> dict[str, Any]:
    """Lfm2VlImageProcessor for images it does not split into tiles.

    The runtime never tiles. HF tiles an image only when splitting is on and the image is
    larger than its token budget (times max_pixels_tolerance); such an image raises
    ValueError here, since the two sides then see different inputs by design.
    """
    import torch

    patch = int(settings.get("encoder_patch_size", 16))
    factor = int(settings.get("downsample_factor", 2))
    low = int(settings.get("min_image_tokens", 64))
    high = int(settings.get("max_image_tokens", 256))
    mean = settings.get("image_mean", [0.5, 0.5, 0.5])
    std = settings.get("image_std", [0.5, 0.5, 0.5])
    scale = float(settings.get("rescale_factor", 1 / 255))
    tiles = (int(settings.get("min_tiles", 2)), int(settings.get("max_tiles", 10)))
    splitting = bool(settings.get("do_image_splitting", True)) and tiles != (1, 1)
    tolerance = float(settings.get("max_pixels_tolerance", 2.0))
    tile_patches = (int(settings.get("tile_size", 512)) // patch) ** 2 if splitting else 0
    max_patches = max(high * factor * factor, tile_patches)
    pixels, masks, shapes, tokens = [], [], [], []
    for pil in images:
        image = to_uint8_chw(pil)
        if splitting and _lfm2_too_large(
            image.shape[-2], image.shape[-1], patch, factor, high, tolerance
        ):
            raise ValueError(
                f"HF splits this {image.shape[-1]}x{image.shape[-2]} image into tiles, which "
                "ONNX Runtime GenAI does not do; compare with a smaller image"
            )
        h, w = lfm2_smart_resize(image.shape[-2], image.shape[-1], patch, factor, low, high)
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


def _lfm2_too_large(
    height: int, width: int, patch: int, factor: int, high: int, tolerance: float
) -> bool:
    """Whether HF's Lfm2VlImageProcessor would tile this image (when splitting is on)."""
    total = patch * factor
    h_bar = max(patch, round(height / total) * total)
    w_bar = max(patch, round(width / total) * total)
    return h_bar * w_bar > high * patch * patch * factor * factor * tolerance


def lfm2_smart_resize(
    height: int, width: int, patch: int, factor: int, low: int, high: int
) -> tuple[int, int]:
    """LFM2-VL's target size: multiples of patch·factor within the token budget."""
    total = patch * factor
    min_pixels = low * patch * patch * factor * factor
    max_pixels = high * patch * patch * factor * factor
    h_bar = max(total, round(height / total) * total)
    w_bar = max(total, round(width / total) * total)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(total, math.floor(height / beta / total) * total)
        w_bar = max(total, math.floor(width / beta / total) * total)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / total) * total
        w_bar = math.ceil(width * beta / total) * total
    return h_bar, w_bar
