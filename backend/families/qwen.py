"""Qwen2.5-VL, Qwen3-VL and Qwen3.5 (vision): patch-merger projectors and 3-D M-RoPE."""

from __future__ import annotations

from mmforge.backend.families._base import Cfg, Family, ImageTokens, Projector, dynamic_tokens, ids

# Qwen2VLImageProcessor defaults, used when the checkpoint has no preprocessor config.
_MIN_PIXELS = 56 * 56
_MAX_PIXELS = 28 * 28 * 1280


def _merger(cfg: Cfg) -> Projector:
    merge = cfg.get("vision_config.spatial_merge_size", 2)
    out = cfg.first("vision_config.out_hidden_size", "text_config.hidden_size")
    deepstack = cfg.get("vision_config.deepstack_visual_indexes") or []
    reason = (
        f"Qwen vision towers end in a patch merger: spatial_merge_size={merge} groups "
        f"{merge}×{merge} patches, then an MLP maps them to out_hidden_size={out}"
    )
    fields = {"vision_config.spatial_merge_size": merge, "vision_config.out_hidden_size": out}
    if deepstack:
        reason += f"; DeepStack mergers also tap layers {deepstack}"
        fields["vision_config.deepstack_visual_indexes"] = deepstack
    return Projector(
        "PatchMerger", "spatial merge → LayerNorm → Linear → GELU → Linear", reason, fields
    )


def _qwen_tokens(cfg: Cfg) -> dict[str, int]:
    return ids(
        cfg,
        image_token_id="image_token_id",
        video_token_id="video_token_id",
        vision_start_token_id="vision_start_token_id",
        vision_end_token_id="vision_end_token_id",
    )


def _qwen_image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    patch = pre.first("patch_size", default=cfg.get("vision_config.patch_size", 14))
    merge = pre.first("merge_size", default=cfg.get("vision_config.spatial_merge_size", 2))
    factor = int(patch) * int(merge)
    low = pre.first("min_pixels", "size.shortest_edge", default=_MIN_PIXELS)
    high = pre.first("max_pixels", "size.longest_edge", default=_MAX_PIXELS)
    return dynamic_tokens(
        factor,
        int(low),
        int(high),
        f"resize to multiples of {factor} px within [{low}, {high}] pixels; "
        f"one token per {factor}×{factor} block",
    )


QWEN_STRINGS = ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>")

QWEN2_5_VL = Family(
    key="qwen2_5_vl",
    name="Qwen2.5-VL",
    model_types=("qwen2_5_vl",),
    pipeline_type="qwen2_5_vl",
    hf_class="Qwen2_5_VLForConditionalGeneration",
    projector=_merger,
    token_ids=_qwen_tokens,
    image_tokens=_qwen_image_tokens,
    runtime_token_strings=QWEN_STRINGS,
    notes=(
        "genai_config must name vision_start_token_id and image_token_id, or the runtime "
        "silently falls back to 1-D positions.",
    ),
)

QWEN3_VL = Family(
    key="qwen3_vl",
    name="Qwen3-VL",
    model_types=("qwen3_vl",),
    pipeline_type="qwen3_vl",
    hf_class="Qwen3VLForConditionalGeneration",
    projector=_merger,
    token_ids=_qwen_tokens,
    image_tokens=_qwen_image_tokens,
    runtime_token_strings=QWEN_STRINGS,
    notes=(
        "The runtime has no DeepStack: the vision output carries the DeepStack levels as "
        "extra feature slots and the decoder adds them after the first layers.",
    ),
)

QWEN3_5 = Family(
    key="qwen3_5",
    name="Qwen3.5-VL",
    model_types=("qwen3_5", "qwen3_5_moe"),
    pipeline_type=None,
    no_pipeline_reason=(
        "ONNX Runtime GenAI 0.18 has no qwen3_5 model type, and its text model mixes "
        "Gated DeltaNet (linear attention) layers with full attention"
    ),
    hf_class="Qwen3_5ForConditionalGeneration",
    projector=_merger,
    token_ids=_qwen_tokens,
    image_tokens=_qwen_image_tokens,
)

FAMILIES = (QWEN2_5_VL, QWEN3_VL, QWEN3_5)
