"""Gemma 3n: HF inputs for verify."""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._hooks import ReferenceRequest, RuntimeArrays
from mmforge.backend.families._reference import (
    ReferenceInputs,
    finish,
    image_processor,
    replace_each,
)

SOFT = "<image_soft_token>"


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    r"""Gemma3nProcessor's inputs: each picture's `<image_soft_token>` becomes its block.

    The checkpoint's template writes one `<image_soft_token>` per picture; the processor
    replaces it by "\n\n<start_of_image>", image_seq_length soft tokens and
    "<end_of_image>\n\n" (processing_gemma3n.py, `full_image_sequence`).
    """
    checkpoint = request.checkpoint
    images = request.images
    tensors: dict[str, Any] = {}
    per_image = int(checkpoint.preprocessor.get("image_seq_length", 256))
    if images:
        out = image_processor(checkpoint)(images=images, return_tensors="pt")
        tensors["pixel_values"] = out["pixel_values"]
    full = f"\n\n<start_of_image>{SOFT * per_image}<end_of_image>\n\n"
    expanded = replace_each(request.prompt, SOFT, [full] * len(images))
    return finish(request.tokenizer, request.prompt, expanded, tensors)


def from_runtime(request: RuntimeArrays) -> None:
    """The runtime's pixels [N, 3, S, S], as HF takes them."""
    arrays = request.arrays
    import torch

    if "pixel_values" in arrays:
        pixels = arrays["pixel_values"].astype("float32")
        request.inputs.tensors["pixel_values"] = torch.from_numpy(
            pixels.reshape(-1, *pixels.shape[-3:])
        )
