"""LFM2-VL: HF inputs for verify."""

from __future__ import annotations

from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._hooks import ReferenceRequest, RuntimeArrays
from mmforge.backend.families._reference import (
    ReferenceInputs,
    finish,
    replace_each,
)
from mmforge.backend.families.lfm2.preprocess import lfm2_vl_images


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """Lfm2VlProcessor's inputs for images it does not tile (the runtime never tiles)."""
    checkpoint = request.checkpoint
    tokenizer = request.tokenizer
    prompt = request.prompt
    images = request.images
    tensors: dict[str, Any] = {}
    reps: list[str] = []
    if images:
        try:
            out = lfm2_vl_images(images, dict(checkpoint.preprocessor.data))
        except ValueError as e:
            raise MmforgeError(
                str(e), "The runtime never tiles, so such images differ from HF by design"
            ) from None
        reps = [f"<|image_start|>{'<image>' * n}<|image_end|>" for n in out.pop("num_tokens")]
        tensors.update(out)
    expanded = replace_each(prompt, "<image>", reps)
    return finish(tokenizer, prompt, expanded, tensors)


def from_runtime(request: RuntimeArrays) -> None:
    """The runtime's arrays under HF's names: patches, their mask and patch grid sizes."""
    arrays = request.arrays
    result = request.inputs
    import torch

    if "pixel_values" in arrays:
        result.tensors["pixel_values"] = torch.from_numpy(arrays["pixel_values"].astype("float32"))
        result.tensors["pixel_attention_mask"] = torch.from_numpy(
            arrays["image_attention_mask"].astype("int64")
        )
        result.tensors["spatial_shapes"] = torch.from_numpy(arrays["image_sizes"].astype("int64"))
