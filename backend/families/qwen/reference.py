"""Qwen2.5-VL and Qwen3-VL: HF inputs for verify.

The runtime's inputs as HF's (`from_runtime`): components/hosts/qwen.py, which GLM-4V
shares.
"""

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


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """Qwen2VLProcessor's inputs: one <|image_pad|> per merged patch, and token types."""
    checkpoint = request.checkpoint
    tokenizer = request.tokenizer
    prompt = request.prompt
    images = request.images
    cfg = checkpoint.cfg
    pad = "<|image_pad|>"
    tensors: dict[str, Any] = {}
    counts: list[int] = []
    if images:
        out = image_processor(checkpoint)(images=images, return_tensors="pt")
        merge = int(cfg.get("vision_config.spatial_merge_size", 2))
        counts = [int(g.prod()) // (merge * merge) for g in out["image_grid_thw"]]
        tensors = {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}
    expanded = replace_each(prompt, pad, [pad * n for n in counts])
    result = finish(tokenizer, prompt, expanded, tensors)
    # transformers 5 builds 3-D M-RoPE positions only when mm_token_type_ids marks the
    # image tokens (its processor returns it); without it HF silently uses 1-D positions.
    result.tensors["mm_token_type_ids"] = token_types(result, cfg)
    return result
