"""Idefics3 / SmolVLM: HF inputs for verify, as their processors make them without splitting.

SmolVLMProcessor cannot be built here (its video processor needs torchvision, and it
needs num2words), so the text is expanded as both processors expand a picture that is not
split (processing_idefics3.py `replace_image_token`, processing_smolvlm.py
`get_image_prompt_string` with no rows or columns): `<fake_token_around_image>` +
`<global-img>` + `<image>` × image_seq_len + `<fake_token_around_image>` (tests hold it
against both). The pixels are the checkpoint's own image processor's
(Idefics3ImageProcessor's PIL implementation, which SmolVLM's releases name too), with
the approximation's overrides (do_image_splitting false) where the user accepted one.
"""

from __future__ import annotations

from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._hooks import ReferenceRequest, RuntimeArrays
from mmforge.backend.families._reference import ReferenceInputs, image_processor, replace_each
from mmforge.backend.families.idefics3.graphs import tokens_per_image

FAKE = "<fake_token_around_image>"
GLOBAL = "<global-img>"
IMAGE = "<image>"


def expand(prompt: str, pictures: int, per_image: int) -> str:
    """The processors' text for `pictures` pictures that are not split."""
    picture = FAKE + GLOBAL + IMAGE * per_image + FAKE
    return replace_each(prompt, IMAGE, [picture] * pictures)


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """The processors' inputs without splitting: ids, pixels [1, N, 3, S, S] and their mask.

    The image processor runs with the checkpoint's settings (and an accepted
    approximation's overrides); one that splits with a single tile a picture (its first
    resize no larger than the tile) makes the pixels it makes without splitting.

    Raises:
        MmforgeError: The image processor cuts a picture into tiles (a checkpoint
            converted without the user's consent to read them whole).
    """
    import torch

    checkpoint = request.checkpoint
    tensors: dict[str, Any] = {}
    if request.images:
        processor = image_processor(checkpoint)
        out = processor(images=[request.images], return_tensors="pt", return_row_col_info=True)
        if any(n for grid in (out["rows"], out["cols"]) for row in grid for n in row):
            raise MmforgeError(
                "This checkpoint's image processor splits the picture into tiles "
                "(do_image_splitting), which the package does not",
                "Convert it with --approximate (each picture read whole) and verify that package",
            )
        tensors["pixel_values"] = out["pixel_values"]
        tensors["pixel_attention_mask"] = out["pixel_attention_mask"]
    expanded = expand(request.prompt, len(request.images), tokens_per_image(checkpoint.cfg))
    ids = list(request.tokenizer(expanded)["input_ids"])
    tensors["input_ids"] = torch.tensor([ids])
    tensors["attention_mask"] = torch.ones_like(tensors["input_ids"])
    return ReferenceInputs(prompt=request.prompt, input_ids=ids, tensors=tensors)


def from_runtime(request: RuntimeArrays) -> None:
    """The runtime's pixels, [1, N, 3, S, S], as HF's, with an all-ones pixel mask."""
    import torch

    pixels = request.arrays.get("pixel_values")
    if pixels is not None:
        stacked = pixels.reshape(1, -1, *pixels.shape[-3:]).astype("float32")
        request.inputs.tensors["pixel_values"] = torch.from_numpy(stacked)
        request.inputs.tensors["pixel_attention_mask"] = torch.ones(
            (1, stacked.shape[1], *stacked.shape[-2:]), dtype=torch.long
        )
