"""GLM-4.1V and GLM-4.5V on the runtime's `qwen2_5_vl` pipeline; both convert.

ONNX Runtime GenAI 0.18 has no GLM-4V type; its `qwen2_5_vl` pipeline runs GLM-4.1V
exactly for pictures. Measured (transformers 5.24 against the 0.18 wheel;
benchmarks/seed_probes/probe_glm.py, tests/backend/test_glm4v_host.py, docs/seed-families.md):
- sizing: Glm4vImageProcessor's smart_resize counts a picture as t_bar = 2 frames
  (`t_bar * h_bar * w_bar` against min/max pixels), so it is Qwen2VLImageProcessor's with
  min/max pixels halved: the same grid and bit-identical `pixel_values` (the same
  patch order) for every size tried, except pictures with a side under 28 px, which GLM
  first scales up to 28 and Qwen does not (10×1000: grid [1, 2, 200] against [1, 2, 58]);
  the package's picture sizing (SCALED_UP_SMART_RESIZE) does both, so the runtime gets
  every picture at GLM's size and keeps it;
- the runtime's qwen2_5_vl processor (`qwen2_5_vl_image_processor.cpp`, `ProcessImagePrompt`,
  and ort-extensions' `Resize` with smart_resize) with the halved values gives GLM's grid
  and pixels, with the Qwen families' known difference (halves rounded away from zero),
  which chat's intake removes by handing it pictures already at transformers' size;
- ids: with `<|begin_of_image|>`, `<|image|>`, `<|end_of_image|>` renamed in the package's
  tokenizer.json to the text the runtime splices (tokens.py), the runtime's ids are
  Glm4vProcessor's;
- positions: Glm4vModel.get_rope_index equals Qwen2_5_VLModel.get_rope_index for pictures
  (t = start, h/w = start + row/column, the next text at start + max(h, w) / merge), which
  the runtime's `Qwen2VLPositionInputs::CreateAndInitialize3DPositionIDs`
  (`position_inputs.cpp`) computes from `vision_start_token_id` followed by `image_token_id`.
mobius 0.1 has neither GLM-4V's tower nor its decoder: the package's three graphs are ours
(vision.py, embedding.py, decoder.py; build.py). GLM-4.5V's tower, embedding, picture
path and host are GLM-4.1V's; its decoder is GLM-4.5's mixture of experts (decoder_moe.py,
build_moe; tiny_moe.py has its test checkpoints), an entry made from GLM-4.1V's with
`dataclasses.replace`.
"""

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
from mmforge.backend.families.components.hosts import qwen as qwen_host
from mmforge.backend.families.glm4v import expect, fields, reference, tiny, tiny_moe
from mmforge.backend.families.glm4v.build import build, build_moe
from mmforge.backend.families.glm4v.tokens import adapt_tokenizer
from mmforge.backend.picture_sizing import SCALED_UP_SMART_RESIZE, Sizing, resample_name

# Glm4vImageProcessor's defaults (size.shortest_edge / size.longest_edge), used when the
# checkpoint has no preprocessor config.
_MIN_PIXELS = 112 * 112
_MAX_PIXELS = 28 * 28 * 15000
# A picture is two frames to GLM's smart_resize (temporal_patch_size), one to Qwen's.
FRAMES_PER_PICTURE = 2


def _merger(cfg: Cfg) -> Projector:
    merge = cfg.get("vision_config.spatial_merge_size", 2)
    out = cfg.get("vision_config.out_hidden_size", 4096)
    return Projector(
        "Glm4vVisionPatchMerger",
        "RMSNorm → Conv2d downsample → Linear → LayerNorm → GELU → SwiGLU MLP",
        f"GLM-4V's tower ends in a {merge}×{merge} Conv2d downsample (spatial_merge_size="
        f"{merge}) to out_hidden_size={out}, then a Linear, LayerNorm, GELU and a gated MLP",
        {"vision_config.spatial_merge_size": merge, "vision_config.out_hidden_size": out},
    )


def _tokens(cfg: Cfg) -> dict[str, int]:
    return ids(
        cfg,
        image_token_id="image_token_id",
        video_token_id="video_token_id",
        image_start_token_id="image_start_token_id",
        image_end_token_id="image_end_token_id",
    )


def _sizes(cfg: Cfg, pre: Cfg) -> tuple[int, int, int, int]:
    """(patch, merge, min_pixels, max_pixels) as Glm4vImageProcessor reads them."""
    patch = int(pre.first("patch_size", default=cfg.get("vision_config.patch_size", 14)))
    merge = int(pre.first("merge_size", default=cfg.get("vision_config.spatial_merge_size", 2)))
    low = int(pre.first("size.shortest_edge", "min_pixels", default=_MIN_PIXELS))
    high = int(pre.first("size.longest_edge", "max_pixels", default=_MAX_PIXELS))
    return patch, merge, low, high


def _image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    patch, merge, low, high = _sizes(cfg, pre)
    factor = patch * merge
    return dynamic_tokens(
        factor,
        low // FRAMES_PER_PICTURE,
        high // FRAMES_PER_PICTURE,
        f"resize to multiples of {factor} px, 2·h·w within [{low}, {high}] pixels; "
        f"one token per {factor}×{factor} block",
    )


def _model_fields(cfg: Cfg) -> dict[str, Any]:
    # The runtime builds 3-D positions from vision_start_token_id followed by
    # image_token_id (position_inputs.cpp); without them it silently uses 1-D positions.
    fields = ids(
        cfg,
        image_token_id="image_token_id",
        video_token_id="video_token_id",
        vision_start_token_id="image_start_token_id",
    )
    missing = {"image_token_id", "vision_start_token_id"} - set(fields)
    if missing:
        raise ValueError(
            "config.json lacks "
            + ", ".join("image_start_token_id" if m.startswith("vision") else m for m in missing)
            + ", needed for 3-D positions"
        )
    return fields


def _vision_fields(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    patch, merge, _, _ = _sizes(cfg, pre)
    # No window_size: the runtime reads it only in its QNN pipeline
    # (qwen_vl_vision.cpp, QwenVisionPipeline::CalculateWindowIndex).
    return {"spatial_merge_size": merge, "patch_size": patch, "tokens_per_second": 2.0}


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """The runtime's qwen2_5_vl chain with GLM's pixel budget halved (one frame, not two).

    Glm4vImageProcessor's smart_resize weighs a picture as temporal_patch_size = 2 frames
    against size.shortest_edge / longest_edge; the runtime's Resize (ort-extensions,
    smart_resize) weighs one, so the same limits halved give GLM's grid (measured:
    tests/backend/test_glm4v_host.py). PatchImage lays the patches out in GLM's order.
    """
    patch, merge, low, high = _sizes(cfg, pre)
    temporal = int(
        pre.first("temporal_patch_size", default=cfg.get("vision_config.temporal_patch_size", 2))
    )
    resize = {
        "smart_resize": 1,
        "min_pixels": low // FRAMES_PER_PICTURE,
        "max_pixels": high // FRAMES_PER_PICTURE,
        "patch_size": patch,
        "merge_size": merge,
    }
    return qwen_host.qwen_chain(
        pre, CLIP_MEAN, CLIP_STD, patch, merge=merge, temporal=temporal, resize=resize
    )


def _sizing(cfg: Cfg, pre: Cfg) -> Sizing:
    """GLM's smart_resize: a side under 28 px scaled up, then Qwen's rule, budget halved.

    Qwen's rule rounds halves to even; the runtime keeps a picture at that size as it is.
    """
    patch, merge, low, high = _sizes(cfg, pre)
    return Sizing(
        rule=SCALED_UP_SMART_RESIZE,
        resample=resample_name(pre.get("resample"), "bicubic"),
        factor=patch * merge,
        min_pixels=low // FRAMES_PER_PICTURE,
        max_pixels=high // FRAMES_PER_PICTURE,
    )


def _channels_first(pixels: Any) -> Any:
    """GLM's (Qwen's) flattened patches [N, 3·t·p·p] as [3, everything else]."""
    import numpy as np

    return np.moveaxis(pixels.reshape(pixels.shape[0], 3, -1), 1, 0).reshape(3, -1)


GLM4V_PACKAGE = PackageSpec(
    model_fields=_model_fields,
    vision_fields=_vision_fields,
    vision_inputs={"pixel_values": "pixel_values", "image_grid_thw": "image_grid_thw"},
    processor_json=_processor,
    picture_sizing=_sizing,
    build=build,
    adapt_tokenizer=adapt_tokenizer,
    # Our graphs compute in float32; int4 quantizes the decoder and the token table.
    dtypes=("f32", "int4"),
    notes=(
        "Graphs: all three are mmforge's own (mobius 0.1 has no GLM-4V).",
        "Runs on ONNX Runtime GenAI's qwen2_5_vl pipeline: the processor's pixel budget is "
        "GLM's halved (GLM's smart_resize counts a picture as two frames), and the "
        "package's tokenizer writes GLM's picture markers as <|vision_start|>, "
        "<|image_pad|> and <|vision_end|> (their ids kept), the text the runtime splices.",
        "genai_config's vision_start_token_id is GLM's image_start_token_id, so the runtime "
        "builds GLM's 3-D M-RoPE positions.",
        "Pictures are handed to the runtime already at transformers' size (the runtime's "
        "Resize rounds halves away from zero, and does not first scale a side under 28 px "
        "up to 28 px as GLM does); the runtime's Resize leaves them as they are.",
    ),
)

GLM4V = Family(
    key="glm4v",
    name="GLM-4.1V",
    pipeline_type="qwen2_5_vl",
    recognition=Recognition(model_types=("glm4v",)),
    profile=Profile(
        projector=_merger,
        token_ids=_tokens,
        image_tokens=_image_tokens,
        hf_class="Glm4vForConditionalGeneration",
        fields=fields.GLM4V,
        notes=(
            "Runs on the runtime's qwen2_5_vl pipeline (the runtime has no GLM-4V type): "
            "GLM's pixel budget halved, its picture markers renamed in the package's "
            "tokenizer, the same ids and 3-D positions as transformers.",
            "The decoder is GLM-4's: half of each head rotated (partial_rotary_factor 0.5) "
            "with M-RoPE sections over interleaved pairs, and RMSNorms after attention and "
            "after the MLP.",
        ),
    ),
    package=GLM4V_PACKAGE,
    reference=Reference(
        prepare=reference.prepare,
        from_runtime=qwen_host.from_runtime,
        channels_first=_channels_first,
        config_tokens=("video_token_id",),
    ),
    fixtures=Fixtures(tiny=tiny.GLM4V, released=tiny.RELEASED, expect=expect.GLM4V),
)


def _moe_architecture(cfg: Cfg) -> tuple[str, ...]:
    """The decoder's experts, in words, for inspect and the model card."""
    text = cfg.text
    layers = int(text.get("num_hidden_layers"))
    dense = int(text.get("first_k_dense_replace", 1))
    groups, kept = text.get("n_group", 1), text.get("topk_group", 1)
    routing = (
        f"chosen among the best {kept} of {groups} expert groups, "
        if groups and int(groups) > 1
        else ""
    )
    return (
        f"Mixture of experts on {max(layers - dense, 0)} of {layers} layers (dense MLP on "
        f"the first {dense}): {text.get('n_routed_experts', 128)} routed experts of width "
        f"{text.get('moe_intermediate_size', 1408)}, {text.get('num_experts_per_tok', 8)} "
        f"active per token ({routing}sigmoid router with a correction bias for choosing), "
        f"plus {text.get('n_shared_experts', 1)} shared; the package computes every expert "
        "for every token (the portable form), so decoding costs what the total parameters "
        "cost, not the active ones",
    )


def _next_n_layers(cfg: Cfg) -> tuple[str, ...]:
    """The next-n (multi-token prediction) layers GLM-4.5 checkpoints may carry.

    GLM-4.5 and GLM-4.5-Air store theirs after the last layer (`model.layers.92.*`,
    `model.layers.46.*`); transformers builds `num_hidden_layers` layers, so it never
    loads them (Glm4vMoePreTrainedModel's `_keys_to_ignore_on_load_unexpected` names
    those two only to silence the warning). zai-org/GLM-4.5V's own weights carry none
    (its 18,106 tensors are layers 0-45 exactly); a checkpoint that does is converted
    without them, as transformers runs it.
    """
    text = cfg.text
    layers = int(text.get("num_hidden_layers"))
    extra = max(1, int(text.get("num_nextn_predict_layers") or 0))
    indices = "|".join(str(layers + i) for i in range(extra))
    return (rf"^model\.language_model\.layers\.({indices})\.",)


# GLM-4.5V: GLM-4.1V's entry with the GLM-4.5 mixture-of-experts decoder (decoder_moe.py).
GLM4V_MOE = dataclasses.replace(
    GLM4V,
    key="glm4v_moe",
    name="GLM-4.5V",
    recognition=Recognition(model_types=("glm4v_moe",)),
    profile=dataclasses.replace(
        GLM4V.profile,
        hf_class="Glm4vMoeForConditionalGeneration",
        fields=fields.GLM4V_MOE,
        architecture=_moe_architecture,
        notes=(
            GLM4V.profile.notes[0],
            "The decoder is GLM-4.5's mixture of experts (GLM-4.5-Air's, 106B total, 12B "
            "active): a dense first layer, then routed experts chosen by a sigmoid router "
            "(a correction bias for choosing only, group-limited top-k) plus a shared "
            "expert; half of each head rotated by halves with M-RoPE sections.",
        ),
    ),
    package=dataclasses.replace(
        GLM4V_PACKAGE,
        build=build_moe,
        unused_ok=_next_n_layers,
        notes=(
            "Graphs: all three are mmforge's own (mobius 0.1 has neither GLM-4V nor "
            "GLM-4.5's mixture of experts); the tower and embedding are GLM-4.1V's.",
            *GLM4V_PACKAGE.notes[1:],
            "Experts: every expert runs on every token, weighted by the router (zero when "
            "not chosen); int4 quantizes each expert's MatMuls as it does the rest of the "
            "decoder.",
            "Next-n (multi-token prediction) layers stored after the last layer, which "
            "transformers never loads, are left out (GLM-4.5V's release carries none).",
        ),
    ),
    fixtures=Fixtures(tiny=tiny_moe.GLM4V_MOE, released=tiny_moe.RELEASED, expect=expect.GLM4V_MOE),
)

FAMILIES = (GLM4V, GLM4V_MOE)
