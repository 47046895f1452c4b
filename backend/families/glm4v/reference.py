"""GLM-4.1V: HF inputs for verify, as Glm4vProcessor makes them for pictures."""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._hooks import ReferenceRequest
from mmforge.backend.families._reference import (
    ReferenceInputs,
    finish,
    image_processor,
    replace_each,
    token_types,
)

IMAGE = "<|image|>"


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """Glm4vProcessor's inputs: each `<|image|>` repeated t·h·w / merge² times, token types.

    Glm4vProcessor itself cannot be built without torchvision (its video processor), so
    its picture path is written out: `replace_image_token` repeats the image token once per
    merged patch of the grid, and `create_mm_token_type_ids` marks those ids 1 (pictures;
    mmforge's chat takes no videos). transformers 5 builds GLM's 3-D positions only from
    `mm_token_type_ids`.
    """
    checkpoint = request.checkpoint
    cfg = checkpoint.cfg
    tensors: dict[str, Any] = {}
    counts: list[int] = []
    if request.images:
        out = image_processor(checkpoint)(images=request.images, return_tensors="pt")
        merge = int(cfg.get("vision_config.spatial_merge_size", 2))
        counts = [int(g.prod()) // (merge * merge) for g in out["image_grid_thw"]]
        tensors = {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}
    expanded = replace_each(request.prompt, IMAGE, [IMAGE * n for n in counts])
    result = finish(request.tokenizer, request.prompt, expanded, tensors)
    result.tensors["mm_token_type_ids"] = token_types(result, cfg)
    return result
