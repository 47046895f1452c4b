"""The Qwen-VL pipelines' runtime inputs as transformers takes them, for verify.

ONNX Runtime GenAI's Qwen-VL processors (`qwen2_5_vl`, `qwen3_vl`, `qwen3_5`, ...) hand
the vision graph flattened patches with `image_grid_thw`, each image's patches padded to
the largest image's; transformers concatenates them, and builds 3-D M-RoPE positions
only with `mm_token_type_ids` (`_reference.token_types`). Qwen's entries and GLM-4V,
which runs on `qwen2_5_vl`, read the runtime's inputs this way.
"""

from __future__ import annotations

from mmforge.backend.families._hooks import RuntimeArrays
from mmforge.backend.families._reference import token_types


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
