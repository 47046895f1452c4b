"""Image steps for HF processors that exist only with torchvision.

transformers 5 implements the Phi-4-multimodal and LFM2-VL image processors on torchvision
alone, and torchvision cannot be installed beside the pinned CPU torch. Those families
restate their processors' steps with plain torch (their preprocess.py), using these
helpers, which apply the interpolation kernels torchvision uses on tensors (it calls
`torch.nn.functional.interpolate`), so the pixels are the ones HF would produce.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.pictures import on_white as laid_on_white
from mmforge.backend.pictures import torch_resize as resize

__all__ = ["converts_rgb", "normalize", "resize", "to_uint8_chw"]


def converts_rgb(settings: Any) -> bool:
    """The processor's `do_convert_rgb` (its class default, True, when the key is absent)."""
    from collections.abc import Mapping

    data = getattr(settings, "data", settings)
    return bool(data.get("do_convert_rgb", True)) if isinstance(data, Mapping) else True


def to_uint8_chw(image: Any, on_white: bool = True) -> Any:
    """A PIL image as an RGB uint8 tensor [3, H, W].

    With `on_white` (the processor's do_convert_rgb), a transparent colour is laid on
    white first, as transformers' convert_to_rgb does.
    """
    import torch

    if on_white:
        image = laid_on_white(image)

    rgb = np.asarray(image.convert("RGB"), dtype=np.uint8)
    return torch.from_numpy(rgb.copy()).permute(2, 0, 1).contiguous()


def normalize(image: Any, scale: float, mean: list[float], std: list[float]) -> Any:
    """Rescale, then normalise per channel: (image · scale - mean) / std, as float."""
    import torch

    m = torch.tensor(mean, dtype=torch.float32).view(3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(3, 1, 1)
    return (image.float() * scale - m) / s
