"""Gemma 4 unified: HF inputs for verify."""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._hooks import ReferenceRequest, RuntimeArrays
from mmforge.backend.families._reference import (
    ReferenceInputs,
    audio_features,
    finish,
    replace_each,
    token_types,
)
from mmforge.backend.families.gemma.unified.preprocess import preprocess


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """Gemma4UnifiedProcessor's inputs: one soft token per merged patch or audio frame."""
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
        out = preprocess(checkpoint.preprocessor, images)
        tensors["pixel_values"] = out["pixel_values"]
        tensors["image_position_ids"] = out["image_position_ids"]
        image_reps = [
            f"<|image>{'<|image|>' * int(n)}<image|>" for n in out["num_soft_tokens_per_image"]
        ]
    if audios:
        feats = audio_features(checkpoint, audios)
        tensors["input_features"] = feats["input_features"]
        tensors["input_features_mask"] = feats["input_features_mask"]
        # No audio tower: every valid frame is one soft token, as in the HF processor.
        audio_reps = [
            f"<|audio>{'<|audio|>' * int(mask.sum())}<audio|>"
            for mask in feats["input_features_mask"]
        ]
    expanded = replace_each(prompt, "<|image|>", image_reps)
    expanded = replace_each(expanded, "<|audio|>", audio_reps)
    result = finish(tokenizer, prompt, expanded, tensors)
    result.tensors["mm_token_type_ids"] = token_types(result, cfg)
    return result


def from_runtime(request: RuntimeArrays) -> None:
    """The runtime's merged patches, their positions and audio frames under HF's names."""
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
