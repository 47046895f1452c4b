"""Gemma 3 and Gemma 4: HF inputs for verify."""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._hooks import ReferenceRequest, RuntimeArrays
from mmforge.backend.families._reference import (
    ReferenceInputs,
    audio_features,
    finish,
    image_processor,
    replace_each,
    token_types,
)


def gemma3_prepare(request: ReferenceRequest) -> ReferenceInputs:
    """Gemma3Processor's inputs: fixed image blocks and token_type_ids for image tokens."""
    checkpoint = request.checkpoint
    tokenizer = request.tokenizer
    prompt = request.prompt
    images = request.images
    cfg = checkpoint.cfg
    boi, eoi, soft = "<start_of_image>", "<end_of_image>", "<image_soft_token>"
    tensors: dict[str, Any] = {}
    if images:
        out = image_processor(checkpoint)(images=images, return_tensors="pt")
        tensors["pixel_values"] = out["pixel_values"]
    per_image = int(cfg.get("mm_tokens_per_image", 256))
    full = f"\n\n{boi}{soft * per_image}{eoi}\n\n"
    expanded = replace_each(prompt, boi, [full] * len(images))
    result = finish(tokenizer, prompt, expanded, tensors)
    # token_type_ids mark image tokens: HF Gemma 3 lets them attend bidirectionally.
    image_id = int(cfg.get("image_token_index"))
    result.tensors["token_type_ids"] = (result.tensors["input_ids"] == image_id).long()
    return result


def gemma3_from_runtime(request: RuntimeArrays) -> None:
    """The runtime's pixels, and token_type_ids marking the image tokens."""
    cfg = request.cfg
    arrays = request.arrays
    result = request.inputs
    import torch

    if "pixel_values" in arrays:
        result.tensors["pixel_values"] = torch.from_numpy(arrays["pixel_values"].astype("float32"))
    ids = result.tensors["input_ids"]
    # HF lets image tokens attend to each other bidirectionally (token_type_ids == 1).
    result.tensors["token_type_ids"] = (ids == int(cfg.get("image_token_index"))).long()


def gemma4_prepare(request: ReferenceRequest) -> ReferenceInputs:
    """Gemma4Processor's inputs: image and audio blocks sized by their soft tokens."""
    checkpoint = request.checkpoint
    tokenizer = request.tokenizer
    prompt = request.prompt
    images = request.images
    audios = request.clips
    cfg = checkpoint.cfg
    tensors: dict[str, Any] = {}
    image_reps: list[str] = []
    audio_reps: list[str] = []
    if images:
        out = image_processor(checkpoint)(images=images, return_tensors="pt")
        tensors["pixel_values"] = out["pixel_values"]
        tensors["image_position_ids"] = out["image_position_ids"]
        image_reps = [
            f"<|image>{'<|image|>' * int(n)}<image|>" for n in out["num_soft_tokens_per_image"]
        ]
    if audios:
        feats = audio_features(checkpoint, audios)
        tensors["input_features"] = feats["input_features"]
        tensors["input_features_mask"] = feats["input_features_mask"]
        for mask in feats["input_features_mask"]:
            # Two stride-2 convolutions shorten the frames, as in the HF processor.
            m = mask
            for _ in range(2):
                keep = (len(m) + 2 - 3) // 2 + 1
                m = m[::2][:keep]
            audio_reps.append(f"<|audio>{'<|audio|>' * int(m.sum())}<audio|>")
    expanded = replace_each(prompt, "<|image|>", image_reps)
    expanded = replace_each(expanded, "<|audio|>", audio_reps)
    result = finish(tokenizer, prompt, expanded, tensors)
    result.tensors["mm_token_type_ids"] = token_types(result, cfg)
    return result


def gemma4_from_runtime(request: RuntimeArrays) -> None:
    """The runtime's patches, position ids and audio features under HF's names."""
    cfg = request.cfg
    arrays = request.arrays
    result = request.inputs
    import torch

    if "pixel_values" in arrays:
        result.tensors["pixel_values"] = torch.from_numpy(arrays["pixel_values"].astype("float32"))
        result.tensors["image_position_ids"] = torch.from_numpy(
            arrays["pixel_position_ids"].astype("int64")
        )
    if "audio_embeds" in arrays:
        result.tensors["input_features"] = torch.from_numpy(
            arrays["audio_embeds"].astype("float32")
        )
        result.tensors["input_features_mask"] = torch.from_numpy(
            arrays["audio_attention_mask"].astype(bool)
        )
    result.tensors["mm_token_type_ids"] = token_types(result, cfg)
