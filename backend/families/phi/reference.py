"""Phi-4-multimodal: HF inputs for verify."""

from __future__ import annotations

import re
from typing import Any

from mmforge.backend.families._hooks import ReferenceRequest, RuntimeArrays
from mmforge.backend.families._reference import (
    ReferenceInputs,
    audio_features,
    finish,
    replace_each,
)
from mmforge.backend.families.phi.global_view import with_hf_global_view
from mmforge.backend.families.phi.preprocess import phi4mm_images


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """Phi4MultimodalProcessor's inputs: HD crops, audio features, numbered placeholders."""
    checkpoint = request.checkpoint
    tokenizer = request.tokenizer
    prompt = request.prompt
    images = request.images
    audios = request.clips
    cfg = checkpoint.cfg
    tensors: dict[str, Any] = {}
    image_reps: list[str] = []
    audio_reps: list[str] = []
    image_token = tokenizer.convert_ids_to_tokens(int(cfg.get("vision_config.image_token_id")))
    audio_token = tokenizer.convert_ids_to_tokens(int(cfg.get("audio_config.audio_token_id")))
    if images:
        out = phi4mm_images(images, dict(checkpoint.preprocessor.data))
        image_reps = [image_token * n for n in out.pop("num_img_tokens")]
        tensors.update(out)
    if audios:
        feats = audio_features(checkpoint, audios)
        audio_reps = [audio_token * int(n) for n in feats["audio_embed_sizes"]]
        tensors["audio_input_features"] = feats["audio_input_features"]
        tensors["audio_embed_sizes"] = feats["audio_embed_sizes"]
        if "audio_attention_mask" in feats:
            tensors["audio_attention_mask"] = feats["audio_attention_mask"]
    # The prompt numbers attachments (<|image_1|>, ...); each stands for one expansion.
    expanded = re.sub(r"<\|image_\d+\|>", "<|image|>", prompt)
    expanded = re.sub(r"<\|audio_\d+\|>", "<|audio|>", expanded)
    expanded = replace_each(expanded, "<|image|>", image_reps)
    expanded = replace_each(expanded, "<|audio|>", audio_reps)
    return finish(tokenizer, prompt, expanded, tensors)


def from_runtime(request: RuntimeArrays) -> None:
    """The runtime's arrays under HF's names: pixels, masks, image and audio sizes.

    The global view (crop 0) is made from the runtime's crops as transformers makes it,
    as the package's vision graph makes it (`global_view.py`).
    """
    arrays = request.arrays
    result = request.inputs
    import torch

    if "pixel_values" in arrays:
        sizes = torch.from_numpy(arrays["image_sizes"].astype("int64"))
        pixels = torch.from_numpy(arrays["pixel_values"].astype("float32"))
        result.tensors["image_pixel_values"] = with_hf_global_view(pixels, sizes)
        result.tensors["image_sizes"] = sizes
        result.tensors["image_attention_mask"] = torch.from_numpy(
            arrays["image_attention_mask"].astype("float32")
        )
    if "audio_embeds" in arrays:
        result.tensors["audio_input_features"] = torch.from_numpy(
            arrays["audio_embeds"].astype("float32")
        )
        result.tensors["audio_embed_sizes"] = torch.from_numpy(
            arrays["audio_sizes"].astype("int64")
        )
        result.tensors["audio_attention_mask"] = torch.from_numpy(
            arrays["audio_attention_mask"].astype(bool)
        )
