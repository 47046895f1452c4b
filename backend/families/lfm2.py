"""LFM2-VL (SigLIP2 NaFlex vision tower)."""

from __future__ import annotations

from mmforge.backend.families._base import Cfg, Family, ImageTokens, Projector, ids


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
    low = int(pre.first("min_image_tokens", default=64))
    high = int(pre.first("max_image_tokens", default=256))
    return ImageTokens(
        minimum=low,
        maximum=high,
        rule=f"⌈rows/2⌉·⌈cols/2⌉ of 16px patches, kept within [{low}, {high}] "
        "(no tiling in the runtime)",
    )


LFM2_VL = Family(
    key="lfm2_vl",
    name="LFM2-VL",
    model_types=("lfm2_vl",),
    pipeline_type="lfm2_vl",
    hf_class="Lfm2VlForConditionalGeneration",
    projector=_projector,
    token_ids=lambda cfg: ids(cfg, image_token_id="image_token_id"),
    image_tokens=_image_tokens,
    runtime_token_strings=("<|image_start|>", "<image>", "<|image_end|>"),
    notes=("The runtime does not tile large images, so they differ from HF by design.",),
)

FAMILIES = (LFM2_VL,)
