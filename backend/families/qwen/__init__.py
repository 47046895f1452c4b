"""Qwen2.5-VL, Qwen3-VL and Qwen3.5/3.6 (dense and MoE): patch mergers and 3-D M-RoPE."""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.families._base import (
    CLIP_MEAN,
    CLIP_STD,
    Cfg,
    Family,
    Fixtures,
    ImageTokens,
    PackageSpec,
    Profile,
    Projector,
    Recognition,
    Reference,
    dynamic_tokens,
    ids,
)
from mmforge.backend.families._embedding import text_embedding_without_features
from mmforge.backend.families._hooks import VariantRequest
from mmforge.backend.families.components.hosts import qwen as qwen_host
from mmforge.backend.families.qwen import (
    expect,
    fara,
    fields,
    qwen2_vl,
    qwen3_vl_moe,
    reference,
    tiny,
    tiny_qwen3_5,
)
from mmforge.backend.families.qwen.build import deepstack_vision_output
from mmforge.backend.families.qwen.graph_fixes import qwen3_deepstack, qwen_unpad_images
from mmforge.backend.picture_sizing import SMART_RESIZE, Sizing, resample_name

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


def _qwen_model_fields(cfg: Cfg) -> dict[str, Any]:
    # Without vision_start_token_id or image_token_id the runtime silently falls back to
    # 1-D positions (ORT GenAI 0.18); mobius 0.1 writes neither.
    fields = ids(
        cfg,
        image_token_id="image_token_id",
        video_token_id="video_token_id",
        vision_start_token_id="vision_start_token_id",
    )
    missing = {"image_token_id", "vision_start_token_id"} - set(fields)
    if missing:
        raise ValueError(f"config.json lacks {sorted(missing)}, needed for 3-D positions")
    return fields


def _qwen_vision_fields(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    patch = int(pre.first("patch_size", default=cfg.get("vision_config.patch_size", 14)))
    merge = int(pre.first("merge_size", default=cfg.get("vision_config.spatial_merge_size", 2)))
    fields: dict[str, Any] = {
        "spatial_merge_size": merge,
        "patch_size": patch,
        "tokens_per_second": float(cfg.get("vision_config.tokens_per_second", 2)),
    }
    window = cfg.get("vision_config.window_size")
    if window is not None:
        fields["window_size"] = int(window)
    return fields


def _qwen_sizes(cfg: Cfg, pre: Cfg) -> tuple[int, int, int, int]:
    """(patch, merge, min_pixels, max_pixels) as Qwen2VLImageProcessor reads them."""
    patch = int(pre.first("patch_size", default=cfg.get("vision_config.patch_size", 14)))
    merge = int(pre.first("merge_size", default=cfg.get("vision_config.spatial_merge_size", 2)))
    low = int(pre.first("min_pixels", "size.shortest_edge", default=_MIN_PIXELS))
    high = int(pre.first("max_pixels", "size.longest_edge", default=_MAX_PIXELS))
    return patch, merge, low, high


def _qwen_processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """ort-extensions pipeline matching Qwen2VLImageProcessor with the checkpoint's values.

    PatchImage yields HF's patch order and image_grid_thw; without it the runtime feeds
    a rank-4 image and the vision graph rejects it (mobius 0.1 omits it).
    """
    patch, merge, low, high = _qwen_sizes(cfg, pre)
    temporal = int(
        pre.first("temporal_patch_size", default=cfg.get("vision_config.temporal_patch_size", 2))
    )
    resize = {
        "smart_resize": 1,
        "min_pixels": low,
        "max_pixels": high,
        "patch_size": patch,
        "merge_size": merge,
    }
    return qwen_host.qwen_chain(
        pre, CLIP_MEAN, CLIP_STD, patch, merge=merge, temporal=temporal, resize=resize
    )


def _qwen_sizing(cfg: Cfg, pre: Cfg) -> Sizing:
    """Qwen2VLImageProcessor's smart_resize (halves to even) with its filter."""
    patch, merge, low, high = _qwen_sizes(cfg, pre)
    return Sizing(
        rule=SMART_RESIZE,
        resample=resample_name(pre.get("resample"), "bicubic"),
        factor=patch * merge,
        min_pixels=low,
        max_pixels=high,
    )


QWEN_PACKAGE = PackageSpec(
    model_fields=_qwen_model_fields,
    vision_fields=_qwen_vision_fields,
    vision_inputs={"pixel_values": "pixel_values", "image_grid_thw": "image_grid_thw"},
    processor_json=_qwen_processor,
    picture_sizing=_qwen_sizing,
    graph_fixes=(qwen_unpad_images, text_embedding_without_features),
    notes=(
        "genai_config names vision_start_token_id, image_token_id and video_token_id "
        "(mobius omits them; the runtime then silently uses 1-D positions).",
        "The processor JSON ends in PatchImage and uses the checkpoint's mean/std and "
        "pixel limits.",
        "The runtime's Resize rounds half-way sides away from zero where transformers "
        "rounds them to even (70×56 px: 84×56 against 56×56): mmforge hands the runtime "
        "pictures already at transformers' size (the manifest's pictures.sizing), which "
        "its Resize leaves as they are.",
    ),
)


def _qwen_channels_first(pixels: Any) -> Any:
    """Qwen's flattened patches [N, 3·t·p·p] as [3, everything else]."""
    import numpy as np

    return np.moveaxis(pixels.reshape(pixels.shape[0], 3, -1), 1, 0).reshape(3, -1)


QWEN_REFERENCE = Reference(
    prepare=reference.prepare,
    from_runtime=qwen_host.from_runtime,
    channels_first=_qwen_channels_first,
    config_tokens=("vision_start_token_id", "video_token_id"),
)


def _qwen_placeholder(kind: str, n: int) -> str:
    """What a Qwen prompt in text holds for an image or video (the runtime expands the pad)."""
    pad = {"image": "<|image_pad|>", "video": "<|video_pad|>"}.get(kind)
    return f"<|vision_start|>{pad}<|vision_end|>" if pad else ""


QWEN2_5_VL = Family(
    key="qwen2_5_vl",
    name="Qwen2.5-VL",
    pipeline_type="qwen2_5_vl",
    recognition=Recognition(
        model_types=("qwen2_5_vl",), variant=lambda request: _fara_variant(request)
    ),
    profile=Profile(
        projector=_merger,
        token_ids=_qwen_tokens,
        image_tokens=_qwen_image_tokens,
        hf_class="Qwen2_5_VLForConditionalGeneration",
        runtime_token_strings=QWEN_STRINGS,
        fields=fields.QWEN2_5_VL,
        text_placeholder=_qwen_placeholder,
        notes=(
            "genai_config must name vision_start_token_id and image_token_id, or the runtime "
            "silently falls back to 1-D positions.",
        ),
    ),
    package=QWEN_PACKAGE,
    reference=QWEN_REFERENCE,
    fixtures=Fixtures(
        tiny=tiny.QWEN2_5_VL, released=tiny.RELEASED_QWEN2_5_VL, expect=expect.QWEN2_5_VL
    ),
)


def _deepstack_levels(cfg: Cfg) -> int:
    return len(cfg.get("vision_config.deepstack_visual_indexes") or [])


def _qwen3_hub_layout(name: str) -> str:
    # The untied LM head sits at the top level; mobius looks for it under the language
    # model (mobius 0.1 otherwise leaves decoder.lm_head.weight without weights).
    return "model.language_model.lm_head.weight" if name == "lm_head.weight" else name


QWEN3_PACKAGE = dataclasses.replace(
    QWEN_PACKAGE,
    graph_fixes=(qwen_unpad_images, qwen3_deepstack, text_embedding_without_features),
    module_patch=deepstack_vision_output,
    hidden_multiple=lambda cfg: 1 + _deepstack_levels(cfg),
    rename_checkpoint=_qwen3_hub_layout,
    fused_attention=lambda cfg: False,
)

QWEN3_VL = Family(
    key="qwen3_vl",
    name="Qwen3-VL",
    pipeline_type="qwen3_vl",
    recognition=Recognition(model_types=("qwen3_vl",)),
    profile=Profile(
        projector=_merger,
        token_ids=_qwen_tokens,
        image_tokens=_qwen_image_tokens,
        hf_class="Qwen3VLForConditionalGeneration",
        runtime_token_strings=QWEN_STRINGS,
        fields=fields.QWEN3_VL,
        text_placeholder=_qwen_placeholder,
        notes=(
            "The runtime has no DeepStack: the vision output carries the DeepStack levels as "
            "extra feature slots and the decoder adds them after the first layers.",
        ),
    ),
    package=QWEN3_PACKAGE,
    reference=QWEN_REFERENCE,
    fixtures=Fixtures(tiny=tiny.QWEN3_VL, released=tiny.RELEASED_QWEN3_VL, expect=expect.QWEN3_VL),
)


def _is_moe(cfg: Cfg) -> bool:
    return cfg.text.get("num_experts") is not None


def layer_pattern(cfg: Cfg) -> list[str]:
    """Each decoder layer's kind, as transformers reads it.

    `layer_types` when the config writes it out; otherwise transformers derives it from
    `full_attention_interval` (default 4): full attention on every interval-th layer.
    """
    text = cfg.text
    written = text.get("layer_types")
    if isinstance(written, list):
        return [str(t) for t in written]
    interval = int(text.get("full_attention_interval", 4))
    layers = int(text.get("num_hidden_layers"))
    return [
        "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)
    ]


def _hybrid_architecture(cfg: Cfg) -> tuple[str, ...]:
    kinds = layer_pattern(cfg)
    linear, full = kinds.count("linear_attention"), kinds.count("full_attention")
    where = ", ".join(str(i) for i, k in enumerate(kinds) if k == "full_attention")
    lines = [
        f"Decoder: {linear} linear-attention (Gated DeltaNet) and {full} full-attention "
        f"layers (full attention at {'layer' if full == 1 else 'layers'} {where})"
    ]
    if _is_moe(cfg):
        text = cfg.text
        lines.append(
            f"Mixture of experts: {text.get('num_experts')} routed experts, "
            f"{text.get('num_experts_per_tok')} active per token, plus a shared expert; "
            "the package computes every expert for every token (the graph builder's portable "
            "form), so decoding costs what the total parameters cost, not the active ones"
        )
    return tuple(lines)


QWEN3_5_PACKAGE = dataclasses.replace(
    QWEN_PACKAGE,
    graph_fixes=(qwen_unpad_images, text_embedding_without_features),
    builder_type=lambda cfg: "qwen3_5_moe_vl" if _is_moe(cfg) else "qwen3_5",
    # The multi-token-prediction head the releases ship: transformers skips it on load
    # and generation never runs it.
    unused_ok=lambda cfg: (r"^mtp\.",),
    notes=(
        *QWEN_PACKAGE.notes,
        "The Gated DeltaNet layers' convolution and recurrent state travel as "
        "past_key_values.N.conv_state / recurrent_state (present.N.*); only the "
        "full-attention layers have a KV cache.",
    ),
)

_QWEN3_5_NOTES = (
    "Hybrid decoder: Gated DeltaNet (linear attention) layers and gated full-attention "
    "layers, in the order config.json's layer_types gives.",
    "The multi-token-prediction head (mtp.*) the releases ship is not converted: "
    "generation does not use it.",
)

QWEN3_5 = Family(
    key="qwen3_5",
    name="Qwen3.5 / Qwen3.6",
    pipeline_type="qwen3_5",
    recognition=Recognition(model_types=("qwen3_5",)),
    profile=Profile(
        projector=_merger,
        token_ids=_qwen_tokens,
        image_tokens=_qwen_image_tokens,
        hf_class="Qwen3_5ForConditionalGeneration",
        runtime_token_strings=QWEN_STRINGS,
        fields=fields.QWEN3_5,
        architecture=_hybrid_architecture,
        text_placeholder=_qwen_placeholder,
        notes=_QWEN3_5_NOTES,
    ),
    package=QWEN3_5_PACKAGE,
    reference=QWEN_REFERENCE,
    fixtures=Fixtures(
        tiny=tiny_qwen3_5.QWEN3_5, released=tiny_qwen3_5.RELEASED_QWEN3_5, expect=expect.QWEN3_5
    ),
)

# The same family with experts: only its names, transformers class, fields and test
# checkpoints differ (the package tells the graph builder which model to build).
QWEN3_5_MOE = dataclasses.replace(
    QWEN3_5,
    key="qwen3_5_moe",
    name="Qwen3.5 / Qwen3.6 MoE",
    pipeline_type="qwen3_5_moe",
    recognition=Recognition(model_types=("qwen3_5_moe",)),
    profile=dataclasses.replace(
        QWEN3_5.profile, hf_class="Qwen3_5MoeForConditionalGeneration", fields=fields.QWEN3_5_MOE
    ),
    fixtures=Fixtures(
        tiny=tiny_qwen3_5.QWEN3_5_MOE,
        released=tiny_qwen3_5.RELEASED_QWEN3_5_MOE,
        expect=expect.QWEN3_5_MOE,
    ),
)

# --- Fara: a Qwen2.5-VL fine-tune the runtime runs as `fara` (see fara.py) -----------
# The runtime's `fara` type is its `qwen2_5_vl` under another name; Fara releases declare
# model_type qwen2_5_vl, so QWEN2_5_VL's `variant` picks this entry by the checkpoint's
# name and the package says `fara`, as the runtime expects for them.
_FARA_TINY = fara.fara_tiny(tiny.QWEN2_5_VL)
FARA: Family = dataclasses.replace(
    QWEN2_5_VL,
    key="fara",
    name="Fara",
    pipeline_type="fara",
    recognition=Recognition(model_types=QWEN2_5_VL.recognition.model_types),
    profile=dataclasses.replace(
        QWEN2_5_VL.profile,
        notes=(
            "Fara (microsoft/Fara-7B) is a Qwen2.5-VL fine-tune: its config.json says "
            "model_type qwen2_5_vl, and mmforge recognises it by its name (hub repository, "
            "folder or _name_or_path). The package is Qwen2.5-VL's with model.type 'fara'; "
            "ONNX Runtime GenAI 0.18 runs 'fara' exactly as 'qwen2_5_vl' (same image "
            "processor, same 3-D M-RoPE positions, same pipeline).",
            *QWEN2_5_VL.profile.notes,
        ),
    ),
    fixtures=Fixtures(tiny=_FARA_TINY, released=fara.fara_released(_FARA_TINY)),
)


def _fara_variant(request: VariantRequest) -> Family | None:
    return FARA if fara.names_fara(request.config, request.folder) else None


# --- end Fara ------------------------------------------------------------------------

# Qwen2-VL runs on the runtime's qwen2_5_vl pipeline (see qwen2_vl.py): the same package
# files and reference inputs; its graphs differ, and mobius builds them for `qwen2_vl`.
QWEN2_VL = dataclasses.replace(
    QWEN2_5_VL,
    key="qwen2_vl",
    name="Qwen2-VL",
    recognition=Recognition(model_types=("qwen2_vl",)),
    profile=dataclasses.replace(
        QWEN2_5_VL.profile,
        projector=qwen2_vl.merger,
        hf_class="Qwen2VLForConditionalGeneration",
        fields=qwen2_vl.FIELDS,
        architecture=qwen2_vl.architecture,
        notes=(
            "ONNX Runtime GenAI 0.18 has no qwen2_vl type: the package says qwen2_5_vl, whose "
            "image processor, framing and 3-D positions are Qwen2-VL's; genai_config has no "
            "vision.window_size, so nothing windows the tower (it attends fully in every "
            "block).",
            *QWEN2_5_VL.profile.notes,
        ),
    ),
    fixtures=Fixtures(tiny=qwen2_vl.TINY, released=qwen2_vl.RELEASED, expect=expect.QWEN2_VL),
)

# Qwen3-VL MoE: Qwen3-VL with sparse expert layers (qwen3_vl_moe.py).
QWEN3_VL_MOE = qwen3_vl_moe.family(QWEN3_VL, QWEN3_PACKAGE)

FAMILIES = (QWEN2_5_VL, QWEN3_VL, QWEN3_VL_MOE, QWEN3_5, QWEN3_5_MOE, FARA, QWEN2_VL)
