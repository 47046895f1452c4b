"""Gemma 3 and Gemma 4 (vision, and audio on the small Gemma 4 sizes), and Gemma 4 unified.

Gemma 4 unified, the encoder-free Gemma 4, is a variant of the Gemma 4 entry: unified/.
"""

from __future__ import annotations

import math
from typing import Any

from mmforge.backend.families._base import (
    Cfg,
    Family,
    Fixtures,
    ImageTokens,
    PackageSpec,
    Profile,
    Projector,
    Recognition,
    Reference,
    as_int,
    ids,
    processor_op,
    square_processor,
)
from mmforge.backend.families._embedding import text_embedding_without_features
from mmforge.backend.families._hooks import FixRequest, PixelsRequest
from mmforge.backend.families.gemma import expect, fields, reference, tiny
from mmforge.backend.families.gemma.attention import bidirectional_image_attention
from mmforge.backend.families.gemma.build import query_pre_attn_scalar
from mmforge.backend.families.gemma.graph_fixes import gemma3_batched_images
from mmforge.backend.families.gemma.moe import (
    expert_blocks,
    gemma4_architecture,
    gemma4_config,
    router_scale_name,
)
from mmforge.backend.families.gemma.sizing import gemma4_sizing
from mmforge.backend.families.gemma.standardize import vision_standardize
from mmforge.backend.families.gemma.tiny_large import RELEASED_LARGE
from mmforge.backend.families.gemma.tokens import adapt_tokenizer as gemma4_tokenizer
from mmforge.backend.families.gemma.unified import make as gemma4_unified
from mmforge.backend.picture_sizing import FIXED, Sizing, resample_name


def _gemma3_projector(cfg: Cfg) -> Projector:
    image = as_int(cfg.get("vision_config.image_size", 896))
    patch = as_int(cfg.get("vision_config.patch_size", 14))
    tokens = int(cfg.get("mm_tokens_per_image", 256))
    side = image // patch
    kernel = side // max(1, math.isqrt(tokens))
    return Projector(
        "Gemma3MultiModalProjector",
        "AvgPool2d → RMSNorm → MatMul",
        f"Gemma 3 pools the {side}×{side} patch grid (image_size={image}, patch_size={patch}) "
        f"with a {kernel}×{kernel} AvgPool2d to mm_tokens_per_image={tokens}, then RMSNorm "
        "and one MatMul",
        {
            "vision_config.image_size": image,
            "vision_config.patch_size": patch,
            "mm_tokens_per_image": tokens,
        },
    )


def _gemma3_image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    tokens = int(cfg.get("mm_tokens_per_image", 256))
    return ImageTokens(fixed=tokens, rule="mm_tokens_per_image, fixed (the runtime hard-codes 256)")


def _gemma3_processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """Fixed-size resize and normalisation, channels first."""
    size = int(pre.first("size.height", default=cfg.get("vision_config.image_size", 896)))
    return square_processor("gemma_3_image_processing", size, pre, resample=2)


def _siglip_hub_layout(name: str) -> str:
    # transformers 5 saves `vision_tower.embeddings...`; hub checkpoints (and mobius) use
    # `vision_tower.vision_model.embeddings...`.
    for prefix in ("vision_tower.", "model.vision_tower."):
        if name.startswith(prefix) and not name.startswith(prefix + "vision_model."):
            return prefix + "vision_model." + name[len(prefix) :]
    return name


def _gemma4_vision_bidirectional(request: FixRequest) -> str | None:
    # The larger Gemma 4 checkpoints let an image's tokens attend both ways on the sliding
    # layers (use_bidirectional_attention="vision"); the small ones are causal.
    if request.cfg.get("text_config.use_bidirectional_attention") != "vision":
        return None
    return bidirectional_image_attention(request, sliding_only=True)


def _gemma3_sizing(cfg: Cfg, pre: Cfg) -> Sizing:
    """Gemma3ImageProcessor's fixed size (the aspect is not kept) with its filter."""
    size = int(pre.first("size.height", default=cfg.get("vision_config.image_size", 896)))
    return Sizing(
        rule=FIXED,
        resample=resample_name(pre.get("resample"), "bilinear"),
        width=size,
        height=size,
    )


GEMMA3_PACKAGE = PackageSpec(
    model_fields=lambda cfg: ids(cfg, image_token_id=("image_token_index", "image_token_id")),
    vision_fields=lambda cfg, pre: {},
    vision_inputs={"pixel_values": "pixel_values"},
    processor_json=_gemma3_processor,
    picture_sizing=_gemma3_sizing,
    rename_checkpoint=_siglip_hub_layout,
    module_patch=query_pre_attn_scalar,
    # Gemma 3 takes the SigLIP tower's last hidden state: the pooling head is never run.
    unused_ok=lambda cfg: (r"vision_tower\.(vision_model\.)?head\.",),
    graph_fixes=(
        bidirectional_image_attention,
        gemma3_batched_images,
        text_embedding_without_features,
    ),
    # mobius 0.1's GroupQueryAttention fusion gives every layer the sliding-window RoPE
    # table (theta 1e4), also the global layers (1e6): logits off by 0.4 on the tiny
    # checkpoint. The portable graph keeps both tables and matches HF to 3e-6.
    fused_attention=lambda cfg: False,
    notes=(
        "Built without mobius's GroupQueryAttention fusion, which applies the local RoPE "
        "table to the global layers too.",
        "No ConvertRGB after DecodeImage (it would swap red and blue).",
        "Keep search.chunk_size unset: the bidirectional image mask needs the image in "
        "one prefill pass.",
    ),
)

GEMMA3 = Family(
    key="gemma3",
    name="Gemma 3",
    pipeline_type="gemma3",
    recognition=Recognition(model_types=("gemma3",)),
    profile=Profile(
        projector=_gemma3_projector,
        token_ids=lambda cfg: ids(
            cfg,
            image_token_id=("image_token_index", "image_token_id"),
            boi_token_id=("boi_token_index", "boi_token_id"),
            eoi_token_id=("eoi_token_index", "eoi_token_id"),
        ),
        image_tokens=_gemma3_image_tokens,
        hf_class="Gemma3ForConditionalGeneration",
        runtime_token_strings=("<start_of_image>", "<image_soft_token>", "<end_of_image>"),
        fields=fields.GEMMA3,
        text_placeholder=lambda kind, n: "<start_of_image>",
        notes=(
            "Image tokens attend to each other bidirectionally in HF; the decoder must build "
            "that mask from input_ids, since token_type_ids never reach it in the runtime.",
            "The runtime hard-codes 256 tokens per image.",
        ),
    ),
    package=GEMMA3_PACKAGE,
    reference=Reference(
        prepare=reference.gemma3_prepare, from_runtime=reference.gemma3_from_runtime
    ),
    fixtures=Fixtures(tiny=tiny.GEMMA3, released=tiny.RELEASED_GEMMA3, expect=expect.GEMMA3),
)


def _gemma4_projector(cfg: Cfg) -> Projector:
    clipped = bool(cfg.get("vision_config.use_clipped_linears", False))
    pool = cfg.get("vision_config.pooling_kernel_size", 3)
    return Projector(
        "Gemma4MultimodalEmbedder",
        "pool → RMSNorm → ClippableLinear",
        f"Gemma 4 pools {pool}×{pool} patches, then embeds vision (and audio) features with "
        f"RMSNorm and a ClippableLinear (use_clipped_linears={clipped}); a plain Linear "
        "is wrong where clipping is learned",
        {
            "vision_config.pooling_kernel_size": pool,
            "vision_config.use_clipped_linears": clipped,
        },
    )


def _gemma4_image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    most = pre.first("max_soft_tokens", "image_seq_length", default=280)
    return ImageTokens(
        maximum=int(most),
        rule=f"aspect-preserving resize, at most {most} soft tokens per image",
    )


def _gemma4_processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """The runtime's Gemma 4 transform (resize, patchify, position ids) in one op."""
    return {
        "processor": {
            "name": "gemma4_image_processor",
            "transforms": [
                processor_op("decode_image", "DecodeImage", {"color_space": "RGB"}),
                processor_op(
                    "gemma4_image_transform",
                    "Gemma4ImageTransform",
                    {
                        "patch_size": int(
                            pre.get("patch_size", cfg.get("vision_config.patch_size", 16))
                        ),
                        "max_soft_tokens": int(pre.get("max_soft_tokens", 280)),
                        "pooling_kernel_size": int(
                            pre.get(
                                "pooling_kernel_size",
                                cfg.get("vision_config.pooling_kernel_size", 3),
                            )
                        ),
                    },
                ),
            ],
        }
    }


def _gemma4_audio_processor(cfg: Cfg, audio: Cfg) -> dict[str, Any]:
    """Gemma4LogMel with the checkpoint's feature extractor settings."""
    rate = int(audio.get("sampling_rate", 16000))
    return {
        "feature_extraction": {
            "sequence": [
                processor_op("audio_decoder", "AudioDecoder"),
                processor_op(
                    "gemma4_log_mel",
                    "Gemma4LogMel",
                    {
                        "feature_size": int(audio.get("feature_size", 128)),
                        "sampling_rate": rate,
                        "frame_length_ms": 1000.0 * int(audio.get("frame_length", 320)) / rate,
                        "hop_length_ms": 1000.0 * int(audio.get("hop_length", 160)) / rate,
                        "min_frequency": float(audio.get("min_frequency", 0.0)),
                        "max_frequency": float(audio.get("max_frequency", rate / 2)),
                        "preemphasis": float(audio.get("preemphasis", 0.0)),
                        "preemphasis_htk_flavor": int(
                            bool(audio.get("preemphasis_htk_flavor", True))
                        ),
                        "fft_overdrive": int(bool(audio.get("fft_overdrive", False))),
                        "mel_floor": float(audio.get("mel_floor", 0.001)),
                    },
                ),
            ]
        }
    }


GEMMA4_PACKAGE = PackageSpec(
    model_fields=lambda cfg: ids(
        cfg,
        image_token_id="image_token_id",
        audio_token_id="audio_token_id",
        boa_token_id="boa_token_id",
    ),
    vision_fields=lambda cfg, pre: {},
    vision_inputs={"pixel_values": "pixel_values", "pixel_position_ids": "pixel_position_ids"},
    processor_json=_gemma4_processor,
    picture_sizing=lambda cfg, pre: gemma4_sizing(cfg, pre, pooled=True),
    speech_inputs={"audio_embeds": "input_features", "attention_mask": "input_features_mask"},
    audio_processor_json=_gemma4_audio_processor,
    adapt_tokenizer=gemma4_tokenizer,
    config_patch=gemma4_config,
    rename_checkpoint=router_scale_name,
    module_patch=expert_blocks,
    graph_fixes=(
        _gemma4_vision_bidirectional,
        vision_standardize,
        text_embedding_without_features,
    ),
    fused_attention=lambda cfg: False,
    notes=(
        "genai_config gets a flat global head size (transformers 5 keeps it in "
        "per_layer_config) and per_layer_inputs in embedding outputs and decoder inputs.",
        "Built without mobius's GroupQueryAttention fusion, as for Gemma 3.",
    ),
)


def _gemma4_channels_first(pixels: Any) -> Any:
    """Gemma 4's patches [N, P, p·p·3] as [3, everything else]."""
    return pixels.reshape(-1, 3).T


def _gemma4_hf_pixels(request: PixelsRequest) -> Any:
    hf = request.hf
    runtime = request.runtime
    return hf[:, : runtime.shape[1]]  # HF pads every image to the largest patch count


GEMMA4_REFERENCE = Reference(
    prepare=reference.gemma4_prepare,
    from_runtime=reference.gemma4_from_runtime,
    channels_first=_gemma4_channels_first,
    # Gemma 4's resize differs from HF's over more of the image (FINDINGS: max 0.117).
    pixel_outliers=1.0,
    hf_pixels=_gemma4_hf_pixels,
    audio_extractor="Gemma4AudioFeatureExtractor",
)

GEMMA4 = Family(
    key="gemma4",
    name="Gemma 4",
    pipeline_type="gemma4",
    recognition=Recognition(model_types=("gemma4",)),
    profile=Profile(
        projector=_gemma4_projector,
        token_ids=lambda cfg: ids(
            cfg,
            image_token_id="image_token_id",
            boi_token_id="boi_token_id",
            eoi_token_id="eoi_token_id",
            audio_token_id="audio_token_id",
            boa_token_id="boa_token_id",
            eoa_token_id=("eoa_token_id", "eoa_token_index"),
            video_token_id="video_token_id",
        ),
        image_tokens=_gemma4_image_tokens,
        hf_class="Gemma4ForConditionalGeneration",
        has_vision=lambda cfg: cfg.has("vision_config"),
        has_audio=lambda cfg: cfg.has("audio_config"),
        runtime_token_strings=(
            "<|image>",
            "<|image|>",
            "<image|>",
            "<|audio>",
            "<|audio|>",
            "<audio|>",
        ),
        fields=fields.GEMMA4,
        architecture=gemma4_architecture,
        text_placeholder=lambda kind, n: f"<|{kind}|>",
        notes=(
            "The audio encoder exists only on the small sizes (config.audio_config set); "
            "a config without vision_config is text-only.",
            "The embedding also outputs per_layer_inputs, listed in embedding.outputs and "
            "decoder.inputs.",
            "The runtime resizes images slightly differently from HF; vision parity is measured "
            "on the runtime's own pixels.",
            "The runtime's processor wraps each image and audio block in blank lines that HF's "
            "processor does not write; the package's tokenizer reads them with the block's "
            "markers, so the runtime's ids are Gemma4Processor's.",
            "The runtime takes one audio clip per prompt (Gemma4MultiModalProcessor::Process), "
            "so a conversation holds at most one clip.",
        ),
    ),
    package=GEMMA4_PACKAGE,
    reference=GEMMA4_REFERENCE,
    fixtures=Fixtures(
        tiny=tiny.GEMMA4,
        released=(*tiny.RELEASED_GEMMA4, *RELEASED_LARGE),
        expect=expect.GEMMA4,
    ),
)

# Gemma 4 unified (model_type gemma4_unified): Gemma 4's entry, its encoders replaced.
GEMMA4_UNIFIED = gemma4_unified(GEMMA4)

FAMILIES = (GEMMA3, GEMMA4, GEMMA4_UNIFIED)
