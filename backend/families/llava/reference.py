"""LLaVA, VipLLaVA, Video-LLaVA (pictures): HF inputs for verify, as LlavaProcessor makes them.

The runtime's pixels as HF's (`from_runtime`): components/hosts/videochat.py.
"""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._hooks import ReferenceRequest
from mmforge.backend.families._reference import ReferenceInputs, image_processor, replace_each
from mmforge.backend.families.llava.graphs import keeps_class_token


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """LlavaProcessor's inputs: each `<image>` becomes one `<image>` per feature.

    VideoLlavaProcessor.replace_image_token counts a picture's ids the same way.
    LlavaProcessor counts (height / patch) · (width / patch) of the processed pixels,
    plus the class token under strategy `full`, and tokenizes with the tokenizer's
    special tokens (LLaVA's adds the BOS).
    """
    import torch

    checkpoint = request.checkpoint
    cfg = checkpoint.cfg
    tensors: dict[str, Any] = {}
    reps: list[str] = []
    if request.images:
        out = image_processor(checkpoint)(images=request.images, return_tensors="pt")
        # VideoLlavaImageProcessor (transformers 5.24) still names them
        # `pixel_values_images` unless told otherwise; the model takes `pixel_values`.
        pixels = out["pixel_values"] if "pixel_values" in out else out["pixel_values_images"]
        tensors["pixel_values"] = pixels
        patch = int(cfg.get("vision_config.patch_size", 14))
        height, width = pixels.shape[-2:]
        count = (height // patch) * (width // patch) + (1 if keeps_class_token(cfg) else 0)
        reps = ["<image>" * count] * len(request.images)
    expanded = replace_each(request.prompt, "<image>", reps)
    ids = list(request.tokenizer(expanded)["input_ids"])
    tensors["input_ids"] = torch.tensor([ids])
    tensors["attention_mask"] = torch.ones_like(tensors["input_ids"])
    return ReferenceInputs(prompt=request.prompt, input_ids=ids, tensors=tensors)
