"""InternVL: HF inputs for verify, as InternVLProcessor makes them for one view a picture.

InternVLProcessor cannot be built here: its video processor needs torchvision, which
cannot be installed beside the pinned CPU torch (constructing it with
`video_processor=None` fails too, measured: transformers 5.25 looks the video processor
class up). So the inputs are built from the checkpoint's own image processor
(GotOcr2ImageProcessor, its PIL implementation) and the expansion processing_internvl.py
does (`replace_image_token`): each `<IMG_CONTEXT>` of the prompt becomes `<img>` +
`<IMG_CONTEXT>` × image_seq_length · views + `</img>`, views being the picture's
`num_patches` from the image processor.

The package sees every picture as one 448 × 448 view, where InternVLProcessor (its
processor default, crop_to_patches True) cuts it into tiles plus a thumbnail: an
approximation the user accepts, whose overrides (crop_to_patches false) the image
processor takes (`_reference.image_processor`). Without them the processor tiles, and
the ids count every view, as transformers' InternVLProcessor would.
"""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._hooks import ReferenceRequest
from mmforge.backend.families._reference import ReferenceInputs, image_processor, replace_each
from mmforge.backend.families.internvl.graphs import tokens_per_image

START, CONTEXT, END = "<img>", "<IMG_CONTEXT>", "</img>"


def expand(prompt: str, views: list[int], per_view: int) -> str:
    """InternVLProcessor's text: the i-th `<IMG_CONTEXT>` framed, per_view × views[i] long."""
    return replace_each(prompt, CONTEXT, [START + CONTEXT * per_view * n + END for n in views])


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """InternVLProcessor's inputs (one view a picture): ids and pixels [N, 3, 448, 448]."""
    import torch

    checkpoint = request.checkpoint
    tensors: dict[str, Any] = {}
    views: list[int] = []
    if request.images:
        out = image_processor(checkpoint)(images=request.images, return_tensors="pt")
        tensors["pixel_values"] = out["pixel_values"]
        views = [int(n) for n in out["num_patches"]]
    expanded = expand(request.prompt, views, tokens_per_image(checkpoint.cfg))
    ids = list(request.tokenizer(expanded)["input_ids"])
    tensors["input_ids"] = torch.tensor([ids])
    tensors["attention_mask"] = torch.ones_like(tensors["input_ids"])
    return ReferenceInputs(prompt=request.prompt, input_ids=ids, tensors=tensors)
