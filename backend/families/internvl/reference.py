"""InternVL: HF inputs for verify, from transformers' own InternVLProcessor.

InternVLProcessor tiles every picture by default (crop_to_patches, its processor default,
outranks the image processor's setting): each `<IMG_CONTEXT>` of the prompt becomes
`<img>` + `<IMG_CONTEXT>` × 256 · views + `</img>`, the views the tiles then the
thumbnail. A package of an earlier version, converted as the approximation of one view a
picture, is compared with the processor run that way (the approximation's overrides,
passed to the call, where they outrank the processor's default).

transformers 5.25 cannot construct InternVLProcessor here as it is: it checks the class
of a `video_processor=None` against a mapping that needs torchvision, which cannot be
installed beside the pinned CPU torch (measured). `_Processor` skips that one check for
a missing video processor; every other step is transformers' own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.families._hooks import ReferenceRequest, RuntimeArrays
from mmforge.backend.families._reference import ReferenceInputs, image_processor
from mmforge.backend.families.components.hosts.videochat import (
    from_runtime as _videochat_from_runtime,
)
from mmforge.backend.families.internvl.graphs import runtime_patch, tokens_per_image, view_size


def processor(checkpoint: Any, tokenizer: Any) -> Any:
    """InternVLProcessor (transformers') on the checkpoint's image processor and tokenizer."""
    from transformers.models.internvl.processing_internvl import InternVLProcessor

    class _Processor(InternVLProcessor):  # type: ignore[misc]
        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    return _Processor(
        image_processor=image_processor(checkpoint),
        tokenizer=tokenizer,
        video_processor=None,
        image_seq_length=tokens_per_image(checkpoint.cfg),
    )


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """InternVLProcessor's ids and pixel_values [views, 3, 448, 448] for the prompt."""
    import torch

    checkpoint = request.checkpoint
    run = processor(checkpoint, request.tokenizer)
    settings = dict(checkpoint.approximation.overrides) if checkpoint.approximation else {}
    out = run(text=request.prompt, images=request.images or None, return_tensors="pt", **settings)
    ids = [int(t) for t in out["input_ids"][0]]
    tensors: dict[str, Any] = {"input_ids": torch.tensor([ids])}
    tensors["attention_mask"] = torch.ones_like(tensors["input_ids"])
    if request.images:
        tensors["pixel_values"] = out["pixel_values"]
    return ReferenceInputs(prompt=request.prompt, input_ids=ids, tensors=tensors)


def views_from_rows(pixels: Any, grid: Any, side: int, patch: int) -> Any:
    """The runtime's canvases as transformers' views, [views, 3, side, side], in order.

    Args:
        pixels: The Qwen processor's pixel_values, [rows, 3·2·p·p]: each picture's
            patches row by row (two equal frames each), the pictures one after another
            (a shorter one's rows padded to the longest's, as the runtime stacks them).
        grid: Its image_grid_thw, [pictures, 3].
        side: The view's side (448).
        patch: The runtime's patch side (28).
    """
    pixels = np.asarray(pixels, dtype=np.float32)
    grid = np.asarray(grid, dtype=np.int64).reshape(-1, 3)
    longest = pixels.shape[0] // grid.shape[0]
    n = side // patch
    out = []
    for i, (_, down, across) in enumerate(grid.tolist()):
        rows = pixels[i * longest : i * longest + down * across]
        rows = rows.reshape(down // n, n, across, 3, 2, patch, patch)[:, :, :, :, 0]
        out.append(rows.transpose(0, 3, 1, 4, 2, 5).reshape(-1, 3, side, side))
    return np.concatenate(out)


def from_runtime(request: RuntimeArrays) -> None:
    """The runtime's pixels as InternVLProcessor's pixel_values [views, 3, 448, 448].

    A package of this version hands its canvases' patches, [rows, 3·2·p·p], and grid
    (qwen2_5_vl); one of an earlier version its pictures as [1, N, 3, 448, 448]
    (videochat_flash_qwen, whose grid output is no patch grid).
    """
    import torch

    arrays = request.arrays
    if "pixel_values" not in arrays:
        return
    if arrays["pixel_values"].ndim != 2:  # [1, N, 3, S, S]: an earlier package's
        _videochat_from_runtime(request)
        return
    cfg = request.cfg
    views = views_from_rows(
        arrays["pixel_values"], arrays["image_grid_thw"], view_size(cfg), runtime_patch(cfg)
    )
    request.inputs.tensors["pixel_values"] = torch.from_numpy(views)
