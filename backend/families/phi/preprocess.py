"""Phi4MultimodalImageProcessor restated with plain torch (transformers 5 needs torchvision)."""

from __future__ import annotations

import math
from typing import Any

from mmforge.backend.families._hf_image import converts_rgb, normalize, resize, to_uint8_chw
from mmforge.backend.picture_sizing import PHI4_HD, Sizing, phi4_hd_fit


def phi4mm_sizing(settings: Any) -> Sizing:
    """Phi4MultimodalImageProcessor's HD fit and kernel (torchvision's antialiased bilinear)."""
    data = getattr(settings, "data", settings)
    size = data.get("size") if isinstance(data.get("size"), dict) else {}
    return Sizing(
        rule=PHI4_HD,
        resample="bilinear",
        factor=int(size.get("height") or 448),
        kernel="torch",
        max_crops=int(data.get("dynamic_hd") or 36),
    )


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
        image = to_uint8_chw(pil, converts_rgb(settings))
        padded, mask = _phi4_dynamic(image, crop, patch, mask_size, max_num)
        processed = normalize(padded, scale, mean, std)
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
    (new_w, new_h), (w_crops, h_crops) = phi4_hd_fit(orig_w, orig_h, crop, max_num)
    target_w, target_h = crop * w_crops, crop * h_crops
    pad_w, pad_h = target_w - new_w, target_h - new_h
    mask = torch.ones(mask_size * h_crops, mask_size * w_crops)
    if pad_w >= patch:
        mask[:, -math.floor(pad_w / patch) :] = 0
    if pad_h >= patch:
        mask[-math.floor(pad_h / patch) :, :] = 0
    resized = resize(image, new_h, new_w, "bilinear")
    padded = torch.full((3, target_h, target_w), 255, dtype=torch.uint8)
    padded[:, :new_h, :new_w] = resized
    return padded, mask
