"""The Qwen-VL pipelines: their pixel chain, and their runtime inputs as transformers takes them.

ONNX Runtime GenAI's Qwen-VL processors (`qwen2_5_vl`, `qwen3_vl`, `qwen3_5`, ...) hand
the vision graph flattened patches with `image_grid_thw`, each image's patches padded to
the largest image's; transformers concatenates them, and builds 3-D M-RoPE positions
only with `mm_token_type_ids` (`_reference.token_types`). Qwen's entries and GLM-4V,
which runs on `qwen2_5_vl`, read the runtime's inputs this way.
"""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._base import Cfg, processor_op, rescale_and_normalize
from mmforge.backend.families._hooks import RuntimeArrays
from mmforge.backend.families._reference import token_types


def qwen_chain(
    pre: Cfg,
    mean: list[float],
    std: list[float],
    patch: int,
    *,
    merge: int = 1,
    temporal: int = 2,
    resize: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The processor JSON of a package on the Qwen pipelines (`qwen2_5_image_processor`).

    DecodeImage(RGB) then ConvertRGB swaps red and blue, and Normalize's `qwen2_5_vl`
    swaps them back (measured on 0.18; each alone gives BGR): the pair gives RGB. Then
    the `resize` attributes (Qwen's smart_resize; None: no Resize, the pixels as the
    intake wrote them), the checkpoint's rescale and normalize, and PatchImage, which
    lays the patches out in transformers' order with `image_grid_thw`.
    """
    steps = [
        processor_op("decode_image", "DecodeImage", {"color_space": "RGB"}),
        processor_op("convert_to_rgb", "ConvertRGB"),
    ]
    if resize is not None:
        steps.append(processor_op("resize", "Resize", resize))
    steps += rescale_and_normalize(pre, mean, std, qwen=True)
    patching = {"patch_size": patch, "temporal_patch_size": temporal, "merge_size": merge}
    steps.append(processor_op("patch_image", "PatchImage", patching))
    return {"processor": {"name": "qwen2_5_image_processor", "transforms": steps}}


def from_runtime(request: RuntimeArrays) -> None:
    """The runtime's patches without its padding, the image grids and token types."""
    cfg = request.cfg
    arrays = request.arrays
    result = request.inputs
    import numpy as np
    import torch

    if "pixel_values" in arrays:
        grid = arrays["image_grid_thw"].astype("int64")
        pixels = arrays["pixel_values"].astype("float32")
        # The runtime pads each image's patches to the largest image; HF concatenates.
        longest = pixels.shape[0] // grid.shape[0]
        rows = [pixels[i * longest : i * longest + int(g.prod())] for i, g in enumerate(grid)]
        result.tensors["pixel_values"] = torch.from_numpy(np.concatenate(rows))
        result.tensors["image_grid_thw"] = torch.from_numpy(grid)
    result.tensors["mm_token_type_ids"] = token_types(result, cfg)
