"""PaliGemma: HF inputs for verify."""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._hooks import ReferenceRequest, RuntimeArrays
from mmforge.backend.families._reference import (
    ReferenceInputs,
    finish,
    image_processor,
    replace_each,
)
from mmforge.backend.families.paligemma.graphs import image_tokens

IMAGE = "<image>"


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """PaliGemmaProcessor's inputs: K `<image>` ids per picture, the prefix all type 0.

    The checkpoint's template already writes `<bos>` after the pictures and the final
    newline, as the processor does (processing_paligemma.py, prepare_inputs_layout); each
    `<image>` becomes image_seq_length ids (`replace_image_token`).
    """
    checkpoint = request.checkpoint
    images = request.images
    tensors: dict[str, Any] = {}
    if images:
        out = image_processor(checkpoint)(images=images, return_tensors="pt")
        tensors["pixel_values"] = out["pixel_values"]
    per_image = image_tokens(checkpoint.cfg)
    expanded = replace_each(request.prompt, IMAGE, [IMAGE * per_image] * len(images))
    result = finish(request.tokenizer, request.prompt, expanded, tensors)
    result.tensors["token_type_ids"] = result.tensors["input_ids"].new_zeros(
        result.tensors["input_ids"].shape
    )
    return result


def from_runtime(request: RuntimeArrays) -> None:
    """The runtime's pixels and ids under HF's names, with PaliGemma's token types.

    The pixels come stacked [1, N, 3, S, S], HF takes [N, 3, S, S]; the prompt is the
    prefix (token_type_ids 0, as PaliGemmaProcessor makes it), and tokens after the prompt
    (verify's longer forward pass: `prompt_length`) are generated ones, type 1.
    """
    arrays = request.arrays
    result = request.inputs
    import torch

    if "pixel_values" in arrays:
        pixels = arrays["pixel_values"].astype("float32")
        result.tensors["pixel_values"] = torch.from_numpy(pixels.reshape(-1, *pixels.shape[-3:]))
    types = torch.zeros_like(result.tensors["input_ids"])
    if "prompt_length" in arrays:
        types[:, int(arrays["prompt_length"]) :] = 1
    result.tensors["token_type_ids"] = types
