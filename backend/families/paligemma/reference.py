"""PaliGemma: HF inputs for verify."""

from __future__ import annotations

from typing import Any

from mmforge.backend.errors import MmforgeError
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


def from_processor(request: ReferenceRequest) -> ReferenceInputs:
    """The inputs of transformers' PaliGemmaProcessor, for a checkpoint without a template.

    PaliGemma's releases ship no chat template: the processor writes the prompt itself
    (processing_paligemma.py, prepare_inputs_layout): `<image>` per picture, `<bos>`, the
    prefix and a newline, each `<image>` then image_seq_length ids, all token type 0.
    It is called as its documentation asks, the `<image>` tokens first; it takes one
    prefix, and refuses a prompt without a picture.

    Raises:
        MmforgeError: The conversation is not one user message, or has no picture.
    """
    import copy

    from transformers import PaliGemmaProcessor

    text, pictures = _one_prefix(request.messages)
    images = request.images
    if not images:
        raise MmforgeError(
            "The checkpoint has no chat template, and transformers' PaliGemmaProcessor, "
            "which then writes the prompt, takes no prompt without a picture",
            "Verify PaliGemma with a picture",
        )
    if pictures != len(images):
        raise MmforgeError(
            f"The message has {pictures} picture part(s) for {len(images)} picture(s)",
            "Give one picture part per picture",
        )
    # The processor adds PaliGemma's <loc>/<seg> tokens to its tokenizer and turns the
    # tokenizer's BOS off: it gets a copy, and the caller's tokenizer stays as it was.
    processor = PaliGemmaProcessor(
        image_processor=image_processor(request.checkpoint),
        tokenizer=copy.deepcopy(request.tokenizer),
    )
    out = processor(images=[list(images)], text=[IMAGE * len(images) + text], return_tensors="pt")
    tensors = {k: out[k] for k in ("input_ids", "attention_mask", "pixel_values", "token_type_ids")}
    ids = [int(t) for t in tensors["input_ids"][0]]
    return ReferenceInputs(prompt=text, input_ids=ids, tensors=tensors)


def _one_prefix(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """The one user message's text (its text parts joined) and its number of pictures."""
    if len(messages) != 1 or messages[0].get("role") != "user":
        raise MmforgeError(
            "PaliGemma's processor takes one user message (pictures and a prefix), not a "
            "conversation",
            "Verify PaliGemma with one user message",
        )
    content = messages[0].get("content")
    if isinstance(content, str):
        return content, 0
    parts = [p for p in content or [] if isinstance(p, dict)]
    text = "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")
    return text, sum(p.get("type") == "image" for p in parts)


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
