"""Phi3VImageProcessor (remote code) restated with PIL and plain torch.

The released processor: HD_transform (landscape: the widest scale whose crops fit
num_crops, bilinear resize, white padding of the height to a multiple of 336, centred;
portrait images are transposed first and back after), ToTensor + CLIP normalisation, a
global view by torch's bicubic interpolation to 336×336, the crops row by row after it,
zero crops up to num_crops + 1, and (rows·cols + 1)·144 + 1 + (rows + 1)·12 tokens.
"""

from __future__ import annotations

import math
from typing import Any

from mmforge.backend.families._base import CLIP_MEAN, CLIP_STD
from mmforge.backend.families._hf_image import normalize, to_uint8_chw

CROP = 336


def hd_size(width: int, height: int, num_crops: int) -> tuple[int, int, int]:
    """(resized width, resized height, padded height) of a landscape (or square) image."""
    ratio = width / height
    scale = 1
    while scale * math.ceil(scale / ratio) <= num_crops:
        scale += 1
    scale -= 1
    new_w = int(scale * CROP)
    new_h = int(new_w / ratio)
    return new_w, new_h, int(math.ceil(new_h / CROP) * CROP)


def phi3v_images(
    images: list[Any], settings: dict[str, Any], num_crops: int | None = None
) -> dict[str, Any]:
    """pixel_values [images, num_crops + 1, 3, 336, 336], image_sizes, num_img_tokens.

    Args:
        images: PIL images.
        settings: preprocessor_config.json.
        num_crops: The crop budget (default: the settings' num_crops, else 16).
    """
    import torch
    from PIL import Image
    from torch.nn import functional as F

    crops_max = int(num_crops if num_crops is not None else settings.get("num_crops", 16))
    mean = settings.get("image_mean", CLIP_MEAN)
    std = settings.get("image_std", CLIP_STD)
    per_crop = int(settings.get("num_img_tokens", 144))
    side = math.isqrt(per_crop)
    pixels, sizes, tokens = [], [], []
    for pil in images:
        pil = pil.convert("RGB")
        portrait = pil.width < pil.height
        if portrait:  # as released: transposed, made landscape, transposed back
            pil = pil.transpose(Image.Transpose.TRANSPOSE)
        new_w, new_h, pad_h = hd_size(pil.width, pil.height, crops_max)
        resized = pil.resize((new_w, new_h), Image.Resampling.BILINEAR)
        canvas = Image.new("RGB", (new_w, pad_h), (255, 255, 255))
        canvas.paste(resized, (0, (pad_h - new_h) // 2))
        if portrait:
            canvas = canvas.transpose(Image.Transpose.TRANSPOSE)
        pad_w, pad_h = canvas.size
        hd = normalize(to_uint8_chw(canvas), 1 / 255, mean, std)
        glb = F.interpolate(hd[None], size=(CROP, CROP), mode="bicubic", align_corners=False)
        rows, cols = pad_h // CROP, pad_w // CROP
        crops = hd.reshape(3, rows, CROP, cols, CROP).permute(1, 3, 0, 2, 4)
        crops = crops.reshape(-1, 3, CROP, CROP)
        stacked = torch.cat([glb, crops], dim=0)
        pad = torch.zeros(crops_max + 1 - stacked.shape[0], 3, CROP, CROP)
        pixels.append(torch.cat([stacked, pad], dim=0))
        sizes.append([pad_h, pad_w])
        tokens.append((rows * cols + 1) * per_crop + 1 + (rows + 1) * side)
    return {
        "pixel_values": torch.stack(pixels),
        "image_sizes": torch.tensor(sizes, dtype=torch.long),
        "num_img_tokens": tokens,
    }


def with_hf_global_view(pixel_values: Any, image_sizes: Any) -> Any:
    """Pixels whose global view (crop 0) is made from their crops the way HF makes it.

    ORT GenAI 0.18's Phi3ImageTransform produces HF's crops exactly but resamples the
    global view with PIL's antialiased bicubic; HF interpolates the HD image with torch's
    bicubic, without antialiasing. The package's vision graph makes it HF's way.
    """
    from torch.nn import functional as F

    out = pixel_values.clone()
    for i, (height, width) in enumerate(image_sizes.tolist()):
        rows, cols = int(height) // CROP, int(width) // CROP
        crops = pixel_values[i, 1 : 1 + rows * cols].reshape(rows, cols, 3, CROP, CROP)
        whole = crops.permute(2, 0, 3, 1, 4).reshape(1, 3, rows * CROP, cols * CROP)
        out[i, 0] = F.interpolate(whole, size=(CROP, CROP), mode="bicubic", align_corners=False)[0]
    return out
