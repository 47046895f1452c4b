"""Gemma 4 unified: the encoder-free Gemma 4, image patches and audio frames straight in.

There is no vision or audio tower: an image's merged pixel patches (patch_size ×
pooling_kernel_size pixels square) go through LayerNorm → Linear → LayerNorm, plus a
factorised 2-D position embedding, then RMSNorm → Linear into the text width; raw audio
frames (audio_embed_dim samples each) go through RMSNorm → Linear. The text model is
Gemma 4's, with bidirectional attention over an image's tokens on the sliding layers
when use_bidirectional_attention is "vision".

A variant of Gemma 4 (`make`, from the Gemma 4 entry with `dataclasses.replace`), in
Gemma 4's folder: its registry key, model_type and pipeline type are `gemma4_unified`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.families._base import (
    Cfg,
    Family,
    Fixtures,
    ImageTokens,
    PackageSpec,
    Projector,
    Recognition,
    ids,
    processor_op,
)
from mmforge.backend.families._embedding import text_embedding_without_features
from mmforge.backend.families._hooks import FixRequest
from mmforge.backend.families.gemma.attention import bidirectional_image_attention
from mmforge.backend.families.gemma.moe import expert_blocks, global_kv_heads, unified_names
from mmforge.backend.families.gemma.sizing import gemma4_sizing
from mmforge.backend.families.gemma.tokens import adapt_tokenizer
from mmforge.backend.families.gemma.unified import expect, fields, reference, tiny


def _model_patch(cfg: Cfg, pre: Cfg) -> int:
    patch = int(pre.get("patch_size", cfg.get("vision_config.patch_size", 16)))
    pool = int(pre.get("pooling_kernel_size", cfg.get("vision_config.pooling_kernel_size", 3)))
    return patch * pool


def _projector(cfg: Cfg) -> Projector:
    patch = int(cfg.get("vision_config.patch_size", 16))
    pool = int(cfg.get("vision_config.pooling_kernel_size", 3))
    return Projector(
        "Gemma4UnifiedVisionEmbedder",
        "LayerNorm → Linear → LayerNorm → +2-D position → LayerNorm → RMSNorm → Linear",
        f"Gemma 4 unified has no vision tower: each {patch * pool}×{patch * pool} pixel patch "
        f"(patch_size={patch} × pooling_kernel_size={pool}) is embedded directly, and audio "
        "frames go through RMSNorm → Linear",
        {"vision_config.patch_size": patch, "vision_config.pooling_kernel_size": pool},
    )


def _image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    most = int(pre.first("max_soft_tokens", "image_seq_length", default=280))
    return ImageTokens(
        maximum=most,
        rule=f"aspect-preserving resize, one token per merged patch, at most {most} per image",
    )


def _vision_bidirectional(request: FixRequest) -> str | None:
    cfg = request.cfg
    if cfg.get("text_config.use_bidirectional_attention") != "vision":
        return None
    return bidirectional_image_attention(request)


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """The runtime's Gemma 4 transform, patchifying at the merged patch size.

    HF cuts patch_size patches and merges pooling_kernel_size² neighbours into one; the
    merged patch is the plain (row, column, channel) crop of the merged size, so the
    runtime's transform with that patch size and no pooling gives the same patches,
    positions and resize (both resize to multiples of the merged size within
    max_soft_tokens merged patches).
    """
    return {
        "processor": {
            "name": "gemma4_image_processor",
            "transforms": [
                processor_op("decode_image", "DecodeImage", {"color_space": "RGB"}),
                processor_op(
                    "gemma4_image_transform",
                    "Gemma4ImageTransform",
                    {
                        "patch_size": _model_patch(cfg, pre),
                        "max_soft_tokens": int(pre.get("max_soft_tokens", 280)),
                        "pooling_kernel_size": 1,
                    },
                ),
            ],
        }
    }


def _audio_processor(cfg: Cfg, audio: Cfg) -> dict[str, Any]:
    """Raw frames of audio_samples_per_token samples.

    ORT GenAI 0.18 accepts this as `Gemma4Audio` with `type: raw_frames`; it rejects the
    `Gemma4UnifiedAudioFrames` op name its own test fixture script writes.
    """
    samples = int(
        audio.first(
            "audio_samples_per_token",
            "feature_size",
            default=cfg.get("audio_config.audio_embed_dim", 640),
        )
    )
    return {
        "feature_extraction": {
            "sequence": [
                processor_op("audio_decoder", "AudioDecoder"),
                processor_op(
                    "gemma4_audio",
                    "Gemma4Audio",
                    {
                        "type": "raw_frames",
                        "audio_samples_per_token": samples,
                        "sampling_rate": int(audio.get("sampling_rate", 16000)),
                    },
                ),
            ]
        }
    }


PACKAGE = PackageSpec(
    model_fields=lambda cfg: ids(
        cfg,
        image_token_id="image_token_id",
        audio_token_id="audio_token_id",
        boa_token_id="boa_token_id",
    ),
    vision_fields=lambda cfg, pre: {},
    vision_inputs={"pixel_values": "pixel_values", "pixel_position_ids": "pixel_position_ids"},
    processor_json=_processor,
    picture_sizing=lambda cfg, pre: gemma4_sizing(cfg, pre, pooled=False),
    speech_inputs={"audio_embeds": "input_features", "attention_mask": "input_features_mask"},
    audio_processor_json=_audio_processor,
    adapt_tokenizer=adapt_tokenizer,
    config_patch=global_kv_heads,
    module_patch=expert_blocks,
    rename_checkpoint=unified_names,
    graph_fixes=(_vision_bidirectional, text_embedding_without_features),
    fused_attention=lambda cfg: False,
    notes=(
        "Image patches are cut at the merged size (patch_size × pooling_kernel_size) by "
        "the runtime's Gemma 4 transform with no pooling; audio as raw frames "
        "(Gemma4Audio, type raw_frames).",
        "Built without mobius's GroupQueryAttention fusion, as for Gemma 4.",
        "Keep search.chunk_size unset: the bidirectional image mask needs the image in "
        "one prefill pass.",
    ),
)


def make(gemma4: Family) -> Family:
    """The Gemma 4 unified entry: Gemma 4's with its encoder-free embedders.

    Gemma 4 with other encoders: the token ids, strings, placeholders and the runtime's
    processor framing are Gemma 4's, so the entry is Gemma 4's with what differs replaced.
    """
    assert gemma4.reference is not None
    return dataclasses.replace(
        gemma4,
        key="gemma4_unified",
        name="Gemma 4 unified",
        pipeline_type="gemma4_unified",
        recognition=Recognition(model_types=("gemma4_unified",)),
        profile=dataclasses.replace(
            gemma4.profile,
            projector=_projector,
            image_tokens=_image_tokens,
            hf_class="Gemma4UnifiedForConditionalGeneration",
            fields=fields.GEMMA4_UNIFIED,
            notes=(
                "Encoder-free: the 'vision encoder' and 'audio encoder' graphs are the patch "
                "and frame embedders, with no transformer layers.",
                "Image tokens of one image attend both ways on the sliding layers (global "
                "layers stay causal), the mask built from input_ids in the decoder.",
            ),
        ),
        package=PACKAGE,
        reference=dataclasses.replace(
            gemma4.reference,
            prepare=reference.prepare,
            # from_runtime: Gemma 4's (the same patches, positions and features by name)
            audio_extractor="Gemma4UnifiedAudioFeatureExtractor",
        ),
        fixtures=Fixtures(tiny=tiny.TINY, expect=expect.GEMMA4_UNIFIED),
    )
