"""GLM-4.1V and GLM-4.5V: inspected, measured exact on `qwen2_5_vl`, not converted yet.

Measured (transformers 5.24 against the ONNX Runtime GenAI 0.18 wheel;
benchmarks/seed_probes/probe_glm.py, tests/backend/test_glm4v_host.py, docs/seed-families.md):
- sizing: Glm4vImageProcessor's smart_resize counts a picture as t_bar = 2 frames
  (`t_bar * h_bar * w_bar` against min/max pixels), so it is Qwen2VLImageProcessor's with
  min/max pixels halved: the same grid and bit-identical `pixel_values` (the same
  patch order) for every size tried, except pictures with a side under 28 px, which GLM
  first scales up to 28 and Qwen does not (10×1000: grid [1, 2, 200] against [1, 2, 58]);
- the runtime's qwen2_5_vl processor (`qwen2_5_vl_image_processor.cpp`, `ProcessImagePrompt`,
  and ort-extensions' `Resize` with smart_resize) with the halved values gives GLM's grid
  and pixels, with the Qwen families' known difference (halves rounded away from zero);
- ids: with `<|begin_of_image|>`, `<|image|>`, `<|end_of_image|>` renamed in the package's
  tokenizer.json to the text the runtime splices, the runtime's ids are Glm4vProcessor's;
- positions: Glm4vModel.get_rope_index equals Qwen2_5_VLModel.get_rope_index for pictures
  (t = start, h/w = start + row/column, the next text at start + max(h, w) / merge), which
  the runtime's `Qwen2VLPositionInputs::CreateAndInitialize3DPositionIDs`
  (`position_inputs.cpp`) computes from `vision_start_token_id` followed by `image_token_id`.
mobius 0.1 has neither GLM-4V's tower nor its decoder: ours are vision.py, embedding.py and
decoder.py (GLM-4.1V), each held to transformers by a test, and a package assembled from them
by hand gives transformers' greedy tokens on the 0.18 wheel (tests/backend/test_glm4v_e2e.py).
What is missing for conversion is the package recipe (PackageSpec, tokenizer renames, chat
template), the tiny and release-shaped checkpoints, verify's reference and fields.py; for
GLM-4.5V also its mixture-of-experts decoder.
"""

from __future__ import annotations

from mmforge.backend.families._base import (
    Cfg,
    DefaultConfig,
    Expectations,
    Family,
    Fixtures,
    ImageTokens,
    Profile,
    Projector,
    Recognition,
    dynamic_tokens,
    ids,
)

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


def _image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    patch = int(pre.first("patch_size", default=cfg.get("vision_config.patch_size", 14)))
    merge = int(pre.first("merge_size", default=cfg.get("vision_config.spatial_merge_size", 2)))
    factor = patch * merge
    low = int(pre.first("size.shortest_edge", "min_pixels", default=_MIN_PIXELS))
    high = int(pre.first("size.longest_edge", "max_pixels", default=_MAX_PIXELS))
    return dynamic_tokens(
        factor,
        low // FRAMES_PER_PICTURE,
        high // FRAMES_PER_PICTURE,
        f"resize to multiples of {factor} px, 2·h·w within [{low}, {high}] pixels; "
        f"one token per {factor}×{factor} block",
    )


_SEE = "; docs/seed-families.md has the details"

_HOST = (
    "ONNX Runtime GenAI 0.18 could run it exactly through its 'qwen2_5_vl' pipeline "
    "(measured on the 0.18 wheel): its processor (qwen2_5_vl_image_processor.cpp, "
    "ProcessImagePrompt, and ort-extensions' smart_resize) gives GLM's grid and pixels with "
    "min/max pixels halved (GLM's smart_resize counts a picture as two frames), pictures with "
    "a side under 28 px excepted (GLM scales them up first), with the Qwen hosts' known "
    "rounding of halves; the package's tokenizer.json, "
    "with <|begin_of_image|>, <|image|> and <|end_of_image|> renamed to the marker text the "
    "runtime splices, gives Glm4vProcessor's ids; and position_inputs.cpp "
    "(Qwen2VLPositionInputs::CreateAndInitialize3DPositionIDs) computes Glm4vModel."
    "get_rope_index's 3-D positions for pictures. {what}" + _SEE
)


GLM4V = Family(
    key="glm4v",
    name="GLM-4.1V",
    pipeline_type=None,
    exact_host="qwen2_5_vl",
    recognition=Recognition(model_types=("glm4v",)),
    profile=Profile(
        projector=_merger,
        token_ids=_tokens,
        image_tokens=_image_tokens,
        hf_class="Glm4vForConditionalGeneration",
        notes=(
            "The decoder is GLM-4's: half of each head rotated (partial_rotary_factor 0.5) "
            "with M-RoPE sections over interleaved pairs, and RMSNorms after attention and "
            "after the MLP.",
        ),
    ),
    fixtures=Fixtures(
        expect=Expectations(
            default_config=DefaultConfig(
                "Glm4vConfig",
                "Glm4vVisionPatchMerger",
                {"image_token_id": 151343, "image_start_token_id": 151339},
                ("vision_encoder", "embedding", "decoder"),
            )
        )
    ),
    no_pipeline_reason=_HOST.format(
        what="mmforge has its graphs (glm4v/vision.py, embedding.py, decoder.py, each equal "
        "to transformers, and a package of them gives transformers' greedy tokens on the "
        "0.18 wheel, tests/backend/test_glm4v_e2e.py) but does not convert it yet: the "
        "package recipe (genai_config, processor JSON, the marker renames and chat template, "
        "the weights path), its tiny and release-shaped checkpoints, verify's reference and "
        "its config-field rules are not written"
    ),
)

GLM4V_MOE = Family(
    key="glm4v_moe",
    name="GLM-4.5V",
    pipeline_type=None,
    exact_host="qwen2_5_vl",
    recognition=Recognition(model_types=("glm4v_moe",)),
    profile=Profile(
        projector=_merger,
        token_ids=_tokens,
        image_tokens=_image_tokens,
        hf_class="Glm4vMoeForConditionalGeneration",
        notes=(
            "GLM-4.5V's decoder is GLM-4.5's mixture of experts (routed experts with a "
            "shared expert, dense first layers); its picture path is GLM-4.1V's.",
        ),
    ),
    fixtures=Fixtures(
        expect=Expectations(
            default_config=DefaultConfig(
                "Glm4vMoeConfig",
                "Glm4vVisionPatchMerger",
                {"image_token_id": 151363, "image_start_token_id": 151339},
                ("vision_encoder", "embedding", "decoder"),
                # transformers' default is 4096 wide over 96 heads with no head_dim, which
                # bounds.py refuses; GLM-4.5V's release says head_dim 128.
                config_kwargs={"text_config": {"head_dim": 128}},
            )
        )
    ),
    no_pipeline_reason=_HOST.format(
        what="mmforge does not build its graphs yet: the tower and embedding are GLM-4.1V's "
        "(written), the GLM-4.5 mixture-of-experts decoder is in neither mobius 0.1 nor "
        "mmforge"
    ),
)

FAMILIES = (GLM4V, GLM4V_MOE)
