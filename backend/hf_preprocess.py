"""HF image preprocessing for processors that exist only with torchvision.

transformers 5 implements the Phi-4-multimodal and LFM2-VL image processors on torchvision
alone, and torchvision cannot be installed beside the pinned CPU torch. These functions
restate those processors' steps with plain torch, using the same interpolation kernels
torchvision uses on tensors (it calls `torch.nn.functional.interpolate`), so the pixels
are the ones HF would produce.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def to_uint8_chw(image: Any) -> Any:
    """A PIL image as an RGB uint8 tensor [3, H, W]."""
    import torch

    rgb = np.asarray(image.convert("RGB"), dtype=np.uint8)
    return torch.from_numpy(rgb.copy()).permute(2, 0, 1).contiguous()


def resize(image: Any, height: int, width: int, mode: str, antialias: bool = True) -> Any:
    """Resize a [C, H, W] tensor the way torchvision's tensor `resize` does.

    uint8 input stays uint8: bilinear runs natively on uint8 on the CPU; other modes run in
    float and are rounded and clamped back, as torchvision does.
    """
    import torch
    from torch.nn import functional as F

    batch = image.unsqueeze(0)
    if image.dtype == torch.uint8 and mode != "bilinear":
        out = F.interpolate(
            batch.float(), size=(height, width), mode=mode, antialias=antialias, align_corners=False
        )
        return out.clamp_(0, 255).round_().to(torch.uint8)[0]
    align = None if mode in ("nearest",) else False
    return F.interpolate(
        batch, size=(height, width), mode=mode, antialias=antialias, align_corners=align
    )[0]


def _normalize(image: Any, scale: float, mean: list[float], std: list[float]) -> Any:
    import torch

    m = torch.tensor(mean, dtype=torch.float32).view(3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(3, 1, 1)
    return (image.float() * scale - m) / s


def phi4mm_images(images: list[Any], settings: dict[str, Any]) -> dict[str, Any]:
    """Phi4MultimodalImageProcessor: HD crops plus a global view, masks and token counts."""
    import torch

    crop = int(settings.get("size", {}).get("height", 448))
    patch = int(settings.get("patch_size", 14))
    max_num = int(settings.get("dynamic_hd", 36))
    mean = settings.get("image_mean", [0.5, 0.5, 0.5])
    std = settings.get("image_std", [0.5, 0.5, 0.5])
    scale = float(settings.get("rescale_factor", 1 / 255))
    mask_size = crop // patch
    pixel_list, mask_list, tokens, sizes = [], [], [], []
    for pil in images:
        image = to_uint8_chw(pil)
        padded, mask = _phi4_dynamic(image, crop, patch, mask_size, max_num)
        processed = _normalize(padded, scale, mean, std)
        global_image = resize(processed, crop, crop, "bicubic", antialias=False)
        height, width = processed.shape[-2:]
        mh, mw = mask.shape
        crops = processed.reshape(1, 3, height // crop, crop, width // crop, crop)
        crops = crops.permute(0, 2, 4, 1, 3, 5).reshape(-1, 3, crop, crop)
        masks = mask.reshape(mh // mask_size, mask_size, mw // mask_size, mask_size)
        masks = masks.transpose(1, 2).reshape(-1, mask_size, mask_size)
        down = masks[:, 0::2, 0::2]
        half = mask_size // 2 + mask_size % 2
        down = down.reshape(mh // mask_size, mw // mask_size, half, half).transpose(1, 2)
        down = down.reshape(down.size(0) * down.size(1), down.size(2) * down.size(3))
        tokens.append(256 + 1 + int(down.sum()) + int(down[:, 0].sum()) + 16)
        pixel_list.append(torch.cat([global_image.unsqueeze(0), crops], dim=0))
        mask_list.append(torch.cat([torch.ones(1, mask_size, mask_size), masks], dim=0))
        sizes.append([height, width])
    most = max(p.size(0) for p in pixel_list)
    pixel_list = [torch.cat([p, torch.zeros(most - p.size(0), *p.shape[1:])]) for p in pixel_list]
    mask_list = [torch.cat([m, torch.ones(most - m.size(0), *m.shape[1:])]) for m in mask_list]
    return {
        "image_pixel_values": torch.stack(pixel_list),
        "image_sizes": torch.tensor(sizes, dtype=torch.long),
        "image_attention_mask": torch.stack(mask_list),
        "num_img_tokens": tokens,
    }


def _phi4_dynamic(image: Any, crop: int, patch: int, mask_size: int, max_num: int) -> Any:
    import torch

    orig_h, orig_w = image.shape[-2:]
    w_crops = math.ceil(orig_w / crop)
    h_crops = math.ceil(orig_h / crop)
    if w_crops * h_crops > max_num:
        ratios = sorted(
            {
                (i, j)
                for n in range(1, max_num + 1)
                for i in range(1, n + 1)
                for j in range(1, n + 1)
                if 1 <= i * j <= max_num
            },
            key=lambda r: r[0] * r[1],
        )
        aspect = orig_w / orig_h
        best, best_diff = (1, 1), float("inf")
        for r in ratios:
            diff = abs(aspect - r[0] / r[1])
            if diff < best_diff:
                best, best_diff = r, diff
            elif diff == best_diff and orig_w * orig_h > 0.5 * crop * crop * r[0] * r[1]:
                best = r
        w_crops, h_crops = best
    target_w, target_h = crop * w_crops, crop * h_crops
    if target_w / orig_w < target_h / orig_h:
        new_w, new_h = target_w, int(orig_h * target_w / orig_w)
        pad_w, pad_h = 0, target_h - new_h
    else:
        new_w, new_h = int(orig_w * target_h / orig_h), target_h
        pad_w, pad_h = target_w - new_w, 0
    mask = torch.ones(mask_size * h_crops, mask_size * w_crops)
    if pad_w >= patch:
        mask[:, -math.floor(pad_w / patch) :] = 0
    if pad_h >= patch:
        mask[-math.floor(pad_h / patch) :, :] = 0
    resized = resize(image, new_h, new_w, "bilinear")
    padded = torch.full((3, target_h, target_w), 255, dtype=torch.uint8)
    padded[:, :new_h, :new_w] = resized
    return padded, mask


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
        image = _normalize(resize(image, h, w, "bilinear"), scale, mean, std)
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
