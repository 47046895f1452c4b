"""Gemma 4 unified: HF inputs for verify."""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._hooks import ReferenceRequest
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
