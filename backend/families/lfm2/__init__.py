"""LFM2-VL (SigLIP2 NaFlex vision tower)."""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._base import (
    RESAMPLE,
    Cfg,
    Family,
    Fixtures,
    ImageTokens,
    PackageSpec,
    Profile,
    Projector,
    Recognition,
    Reference,
    ids,
    image_sizes_pipeline,
    rescale_and_normalize,
)
from mmforge.backend.families.lfm2 import expect, fields, reference, tiny
from mmforge.backend.families.lfm2.build import build
from mmforge.backend.families.lfm2.decoder import layer_kinds
from mmforge.backend.families.lfm2.preprocess import lfm2_sizing


def _projector(cfg: Cfg) -> Projector:
    factor = cfg.get("downsample_factor", 2)
    norm = bool(cfg.get("projector_use_layernorm", True))
    act = cfg.get("projector_hidden_act", "gelu")
    arch = ("LayerNorm → " if norm else "") + f"Linear → {act.upper()} → Linear"
    return Projector(
        "MLPMultiModalProjector",
        f"pixel unshuffle ×{factor} → {arch}",
        f"LFM2-VL folds {factor}×{factor} patches into channels (downsample_factor={factor}), "
        f"then an MLP{' with LayerNorm' if norm else ''} (projector_use_layernorm={norm})",
        {"downsample_factor": factor, "projector_use_layernorm": norm, "projector_hidden_act": act},
    )


def _image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    patch, factor, low, high = _sizes(cfg, pre)
    return ImageTokens(
        minimum=low,
        maximum=high,
        rule=f"⌈rows/{factor}⌉·⌈cols/{factor}⌉ of {patch}px patches, kept within [{low}, {high}] "
        "(no tiling in the runtime)",
    )


def _sizes(cfg: Cfg, pre: Cfg) -> tuple[int, int, int, int]:
    """Patch size, downsample factor, and the token budget (min, max) per image."""
    patch = int(pre.first("encoder_patch_size", default=cfg.get("vision_config.patch_size", 16)))
    factor = int(pre.first("downsample_factor", default=cfg.get("downsample_factor", 2)))
    low = int(pre.first("min_image_tokens", default=64))
    high = int(pre.first("max_image_tokens", default=256))
    return patch, factor, low, high


def _max_patches(cfg: Cfg, pre: Cfg) -> int:
    """HF's padded patch count: the larger of the thumbnail budget and a tile's patches."""
    patch, factor, _, high = _sizes(cfg, pre)
    tile = int(pre.first("tile_size", default=512)) // patch
    splitting = bool(pre.first("do_image_splitting", default=True))
    return max(high * factor * factor, tile * tile if splitting else 0)


def _vision_fields(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    patch, factor, _, _ = _sizes(cfg, pre)
    return {
        "patch_size": patch,
        "spatial_merge_size": factor,
        "max_num_patches": _max_patches(cfg, pre),
    }


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """The runtime's LFM2-VL image pipeline.

    Resize to multiples of patch·factor within the checkpoint's token budget (HF's
    smart_resize), normalise, then CHW and image sizes, which the runtime requires as the
    last two steps.
    """
    patch, factor, low, high = _sizes(cfg, pre)
    block = patch * factor
    return image_sizes_pipeline(
        "lfm2_vl_image_processor",
        min_pixels=low * block * block,
        max_pixels=high * block * block,
        patch=patch,
        merge=factor,
        interpolation=RESAMPLE.get(int(pre.get("resample", 2)), "LINEAR"),
        normalize=rescale_and_normalize(pre, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]),
    )


def _decoder_fields(cfg: Cfg) -> dict[str, Any]:
    return {
        "layer_types": layer_kinds(cfg),
        "conv_cache_size": int(cfg.text.get("conv_L_cache", 3)) - 1,
    }


def _hub_layout(name: str) -> str:
    """Hub checkpoints keep the SigLIP2 tower under vision_model; transformers 5 does not."""
    return name.replace("model.vision_tower.vision_model.", "model.vision_tower.")


LFM2_VL_PACKAGE = PackageSpec(
    # LFM2-VL takes the tower's last hidden state: a pooling head is never run.
    unused_ok=lambda cfg: (r"vision_tower\.(vision_model\.)?head\.",),
    model_fields=lambda cfg: ids(cfg, image_token_id="image_token_id"),
    vision_fields=_vision_fields,
    vision_inputs={
        "pixel_values": "pixel_values",
        "attention_mask": "pixel_attention_mask",
        "image_sizes": "spatial_shapes",
    },
    processor_json=_processor,
    picture_sizing=lambda cfg, pre: lfm2_sizing(pre),
    rename_checkpoint=_hub_layout,
    decoder_fields=_decoder_fields,
    build=build,
    builder_holds_model=True,
    # ORT GenAI's builder has no f16 CPU path for the hybrid decoder.
    dtypes=("f32", "int4"),
    notes=(
        "Graphs: the SigLIP2 NaFlex vision tower and the embedding are mmforge's own (mobius "
        "0.1 has no LFM2); the hybrid conv/attention decoder is ONNX Runtime GenAI's builder's, "
        "its baked weights checked one by one against the checkpoint.",
        "The runtime does not tile large images; HF splits images above its token budget "
        "into tiles, so such images differ from HF by design.",
        "ORT GenAI 0.18's resize fails on images more than about 16:1 in aspect ratio, "
        "where HF clamps the short side to one block.",
        "The runtime cannot rewind the convolution state: a chat turn after a stopped answer "
        "prefills afresh.",
    ),
)

LFM2_VL = Family(
    key="lfm2_vl",
    name="LFM2-VL",
    pipeline_type="lfm2_vl",
    recognition=Recognition(model_types=("lfm2_vl",)),
    profile=Profile(
        projector=_projector,
        token_ids=lambda cfg: ids(cfg, image_token_id="image_token_id"),
        image_tokens=_image_tokens,
        hf_class="Lfm2VlForConditionalGeneration",
        runtime_token_strings=("<|image_start|>", "<image>", "<|image_end|>"),
        fields=fields.LFM2_VL,
        text_placeholder=lambda kind, n: "<image>",
        notes=("The runtime does not tile large images, so they differ from HF by design.",),
    ),
    package=LFM2_VL_PACKAGE,
    reference=Reference(prepare=reference.prepare, from_runtime=reference.from_runtime),
    fixtures=Fixtures(tiny=tiny.LFM2_VL, released=tiny.RELEASED_LFM2_VL, expect=expect.LFM2_VL),
)

FAMILIES = (LFM2_VL,)
