"""Idefics2: HF inputs for verify, as Idefics2Processor makes them."""

from __future__ import annotations

import re
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._hooks import ReferenceRequest, RuntimeArrays
from mmforge.backend.families._reference import ReferenceInputs, image_processor
from mmforge.backend.families.idefics2.graphs import tokens_per_image

FAKE = "<fake_token_around_image>"
IMAGE = "<image>"


def expand(prompt: str, per_image: int) -> str:
    """Idefics2Processor's text: each `<image>` framed by fake tokens, `per_image` long.

    Adjacent pictures share their fake token, and a closing fake token that text follows
    directly (not whitespace, not `<`) gets a space after it (processing_idefics2.py).
    """
    picture = FAKE + IMAGE * per_image + FAKE
    text = prompt.replace(IMAGE, picture).replace(FAKE + FAKE, FAKE)
    return re.sub(rf"{re.escape(FAKE)}(?=[^\s<])", FAKE + " ", text)


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """Idefics2Processor's inputs: ids, pixels [1, N, 3, H, W] and their pixel mask.

    Raises:
        MmforgeError: The pictures differ in size (transformers pads them into one
            tensor; the runtime's pipeline cannot), or the processor splits pictures.
    """
    import torch

    checkpoint = request.checkpoint
    tensors: dict[str, Any] = {}
    if request.images:
        processor = image_processor(checkpoint)
        if getattr(processor, "do_image_splitting", False):
            raise MmforgeError(
                "This Idefics2 checkpoint splits pictures (do_image_splitting), which "
                "mmforge does not convert yet",
                "Set do_image_splitting to false in its preprocessor_config.json",
            )
        out = processor(images=[request.images], return_tensors="pt")
        mask = out["pixel_attention_mask"]
        if not bool(mask.all()):
            raise MmforgeError(
                "The pictures of this prompt differ in size after Idefics2's resize, and "
                "transformers pads them into one tensor, which the runtime cannot",
                "Send pictures of one size and shape in a conversation",
            )
        tensors["pixel_values"] = out["pixel_values"]
        tensors["pixel_attention_mask"] = mask
    expanded = expand(request.prompt, tokens_per_image(checkpoint.cfg))
    ids = list(request.tokenizer(expanded)["input_ids"])
    tensors["input_ids"] = torch.tensor([ids])
    tensors["attention_mask"] = torch.ones_like(tensors["input_ids"])
    return ReferenceInputs(prompt=request.prompt, input_ids=ids, tensors=tensors)


def from_runtime(request: RuntimeArrays) -> None:
    """The runtime's pixels, [1, N, 3, H, W], as HF's, with an all-ones pixel mask."""
    import torch

    pixels = request.arrays.get("pixel_values")
    if pixels is not None:
        stacked = pixels.reshape(1, -1, *pixels.shape[-3:]).astype("float32")
        request.inputs.tensors["pixel_values"] = torch.from_numpy(stacked)
        request.inputs.tensors["pixel_attention_mask"] = torch.ones(
            (1, stacked.shape[1], *stacked.shape[-2:]), dtype=torch.long
        )
