"""Phi3VImageProcessor (remote code) restated with PIL and plain torch.

The released processor: convert_to_rgb where do_convert_rgb says (a transparent colour
laid on white), HD_transform (landscape: the widest scale whose crops fit num_crops,
bilinear resize, white padding of the height to a multiple of 336, centred; portrait
images are transposed first and back after), ToTensor + CLIP normalisation, a global view
by torch's bicubic interpolation to 336×336, the crops row by row after it, zero crops up
to num_crops + 1, and (rows·cols + 1)·144 + 1 + (rows + 1)·12 tokens.
"""

from __future__ import annotations

import math
from typing import Any

from mmforge.backend.families._base import CLIP_MEAN, CLIP_STD
from mmforge.backend.families._hf_image import converts_rgb, normalize, to_uint8_chw
from mmforge.backend.picture_sizing import PHI3V_HD, Sizing
from mmforge.backend.pictures import hd_canvas, on_white

CROP = 336
# ORT GenAI 0.18's Phi3ImageTransform allows this many crops whatever num_crops says.
RUNTIME_CROPS = 16


def phi3v_sizing() -> Sizing:
    """The HD canvas at the runtime's crop budget: the size its Phi3ImageTransform keeps.

    The runtime computes the released sizes without transposing a portrait picture, so its
    bilinear passes run in the other order and round elsewhere (one 8-bit level, measured
    in tests/backend/test_phi3v.py); handed the released canvas (`pictures.hd_canvas`,
    which the intake hands it), it resizes and pads nothing (every canvas of up to 16
    crops is kept), and its crops are the reference's.
    """
    return Sizing(rule=PHI3V_HD, resample="bilinear", factor=CROP, max_crops=RUNTIME_CROPS)


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
    from torch.nn import functional as F

    crops_max = int(num_crops if num_crops is not None else settings.get("num_crops", 16))
    mean = settings.get("image_mean", CLIP_MEAN)
    std = settings.get("image_std", CLIP_STD)
    per_crop = int(settings.get("num_img_tokens", 144))
    side = math.isqrt(per_crop)
    pixels, sizes, tokens = [], [], []
    for pil in images:
        if converts_rgb(settings):  # transformers' convert_to_rgb
            pil = on_white(pil)
        canvas, _ = hd_canvas(pil.convert("RGB"), CROP, crops_max)
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

    ORT GenAI 0.18's Phi3ImageTransform produces HF's crops (exactly when handed the HD
    canvas, `phi3v_sizing`) but resamples the global view with PIL's antialiased bicubic;
    HF interpolates the HD image with torch's bicubic, without antialiasing. The package's
    vision graph makes it HF's way.
    """
    from torch.nn import functional as F

    out = pixel_values.clone()
    for i, (height, width) in enumerate(image_sizes.tolist()):
        rows, cols = int(height) // CROP, int(width) // CROP
        crops = pixel_values[i, 1 : 1 + rows * cols].reshape(rows, cols, 3, CROP, CROP)
        whole = crops.permute(2, 0, 3, 1, 4).reshape(1, 3, rows * CROP, cols * CROP)
        out[i, 0] = F.interpolate(whole, size=(CROP, CROP), mode="bicubic", align_corners=False)[0]
    return out
