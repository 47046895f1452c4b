"""InternVL 3 / 3.5 (InternViT, Qwen2 or Qwen3 decoder), exact, on `qwen2_5_vl`.

ONNX Runtime GenAI 0.18 has no `internvl` type. transformers' InternVLProcessor tiles
every picture (its processor default `crop_to_patches: True` outranks the image
processor's own setting): GotOcr2ImageProcessor cuts it into the closest grid of 448 px
tiles plus a thumbnail when there are several, K = 256 ids a view, framed by `<img>` and
`</img>`. The runtime's `qwen2_5_vl` processor counts each picture it is handed, (H/p) ·
(W/p) ids with merge 1 (docs/seed-families.md, "The variable-count host"); with p the
tower's patch times the pixel shuffle's scale (28), a canvas 448 px wide holding the
views stacked (backend/internvl_tiles.py, made by the intake) is 256 · views ids, and its
marker text reads as InternVL's ids (tokenizer.py). The vision graph (graphs.py) turns
the canvas back into its views. Positions are 1-D, as InternVL's: the M-RoPE ids
genai_config names are an id no tokenizer produces (the vocabulary size), and the pad id
too (as LLaVA-NeXT's, measured in tests/backend/test_varcount_host.py).

Packages converted earlier ran on `videochat_flash_qwen` with one 448 × 448 view a
picture, an approximation the user agreed to (the manifest's record). They keep working:
verify compares them with transformers run the same way (earlier.py, `Family.earlier`)
and says APPROXIMATE.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend import internvl_tiles
from mmforge.backend.errors import MmforgeError
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
    ids,
)
from mmforge.backend.families._hooks import VariantRequest
from mmforge.backend.families.components.hosts.qwen import qwen_chain
from mmforge.backend.families.internvl import (
    earlier,
    expect,
    fields,
    reference,
    tiny,
    tokenizer,
)
from mmforge.backend.families.internvl.graphs import (
    checkpoint_name,
    checkpoint_names,
    int_sizes,
    own_vision_and_embedding,
    runtime_patch,
    tokens_per_image,
    unused_tensors,
    view_size,
)
from mmforge.backend.picture_sizing import TILED_VIEWS, Sizing, resample_name

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def _projector(cfg: Cfg) -> Projector:
    ratio = cfg.get("downsample_ratio", 0.5)
    act = cfg.get("projector_hidden_act", "gelu")
    return Projector(
        "MLPMultiModalProjector",
        f"pixel shuffle → LayerNorm → Linear → {str(act).upper()} → Linear",
        f"InternVL shuffles pixels by downsample_ratio={ratio}, then a LayerNorm + "
        f"two-layer MLP (projector_hidden_act={act})",
        {"downsample_ratio": ratio, "projector_hidden_act": act},
    )


def _per_view(cfg: Cfg) -> int:
    try:
        return tokens_per_image(cfg)
    except MmforgeError:  # an inconsistent config: inspect still shows the release's count
        return int(cfg.get("image_seq_length", 256))


def _tiles(pre: Cfg) -> tuple[int, int]:
    """(min_patches, max_patches) as the image processor reads them (1 and 12 by default)."""
    return int(pre.get("min_patches", 1)), int(pre.get("max_patches", 12))


def _image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    per = _per_view(cfg)
    least, most = _tiles(pre)
    return ImageTokens(
        minimum=per if least == 1 or most <= 1 else per * (least + 1),
        maximum=per * internvl_tiles.most_views(most),
        rule=f"{per} per 448 px view: the closest grid of {least} to {most} tiles by the "
        "picture's aspect ratio, plus a thumbnail when there are several (crop_to_patches)",
    )


def _side(cfg: Cfg, pre: Cfg) -> int:
    """The view's side: the processor's size, which must be the tower's.

    Raises:
        MmforgeError: The processor resizes to another size than the tower's, where
            transformers would interpolate the position embeddings (not built).
    """
    side = view_size(cfg)
    size = pre.get("size")
    if isinstance(size, dict) and "height" in size and "width" in size:
        width, height = int(size["width"]), int(size["height"])
        if (width, height) != (side, side):
            raise MmforgeError(
                f"The image processor resizes pictures to {width} × {height}, the vision "
                f"tower's positions are for {side} × {side}",
                "transformers would interpolate the position embeddings, which mmforge does "
                f"not build: set size to {side} × {side} in preprocessor_config.json",
            )
    return side


def _sizing(cfg: Cfg, pre: Cfg) -> Sizing:
    """GotOcr2ImageProcessor with crop_to_patches: the views stacked in one canvas.

    Raises:
        MmforgeError: The tile counts are inconsistent, or the most views a picture can
            have do not fit one runtime picture (its PNG decoder's 16,384 px).
    """
    side, (least, most) = _side(cfg, pre), _tiles(pre)
    if most <= 1:  # transformers resizes every picture to one view
        least = most = 1
    if not 1 <= least <= most:
        raise MmforgeError(
            f"preprocessor_config.json's min_patches {least} and max_patches {most} allow "
            "no tile grid",
            "Set min_patches between 1 and max_patches (the releases: 1 and 12)",
        )
    tall = side * internvl_tiles.most_views(most)
    if tall > internvl_tiles.MAX_RUNTIME_SIDE:
        raise MmforgeError(
            f"up to {internvl_tiles.most_views(most)} views of {side} px make a {tall} px "
            f"tall picture, past the {internvl_tiles.MAX_RUNTIME_SIDE} px ONNX Runtime GenAI "
            "0.18 decodes",
            "Lower max_patches in preprocessor_config.json (the releases use 12)",
        )
    return Sizing(
        TILED_VIEWS,
        resample_name(pre.get("resample"), "bicubic"),
        factor=side,
        width=side,
        height=side,
        min_crops=least,
        max_crops=most,
    )


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """The Qwen chain without a Resize: the canvas's pixels as they are, patched by p."""
    return qwen_chain(pre, IMAGENET_MEAN, IMAGENET_STD, runtime_patch(cfg))


def _tokens(cfg: Cfg) -> dict[str, int]:
    return ids(cfg, image_token_id="image_token_id")


def _runtime_tokens(cfg: Cfg) -> dict[str, int]:
    """<IMG_CONTEXT>'s id, and the guard (the vocabulary size) for every id the runtime reads.

    Qwen2VLPositionInputs makes 3-D positions at a vision_start id followed by the image
    id; with vision_start never produced, every position is 1-D, as InternVL's.
    """
    guard = int(cfg.text.get("vocab_size"))
    return {
        **_tokens(cfg),
        "vision_start_token_id": guard,
        "video_token_id": guard,
        "pad_token_id": guard,
    }


INTERNVL_PACKAGE = PackageSpec(
    model_fields=_runtime_tokens,
    vision_fields=lambda cfg, pre: {"spatial_merge_size": 1, "patch_size": runtime_patch(cfg)},
    vision_inputs={"pixel_values": "pixel_values", "image_grid_thw": "image_grid_thw"},
    processor_json=_processor,
    dtypes=("f32", "int4", "int8"),
    picture_sizing=_sizing,
    # mobius's `internvl` graphs (its InternVL2 model, the decoder from text_config), the
    # vision and embedding replaced by ours; its tower reads image_size as an int.
    config_patch=int_sizes,
    module_patch=checkpoint_names,
    graph_fixes=(own_vision_and_embedding,),
    rename_checkpoint=checkpoint_name,
    unused_ok=unused_tensors,
    adapt_tokenizer=tokenizer.adapt,
    notes=(
        "InternVL runs on ONNX Runtime GenAI's qwen2_5_vl pipeline: each picture reaches it "
        "as one canvas of its views (the tiles InternVLProcessor cuts, then its thumbnail) "
        "stacked 448 px wide, 256 ids a view as the processor counts them, its marker text "
        "read as <img>, <IMG_CONTEXT> and </img> by the package's tokenizer; 1-D positions.",
        "Pictures are cut as GotOcr2ImageProcessor cuts them (crop_to_patches, PIL's "
        "bicubic) before the runtime sees them; the package's processor has no Resize.",
    ),
)

_NOTES = (
    "Runs on the runtime's qwen2_5_vl pipeline (the runtime has no internvl type): "
    "every picture's tiles and thumbnail as InternVLProcessor makes them (crop_to_patches).",
)

INTERNVL = Family(
    key="internvl",
    name="InternVL",
    pipeline_type="qwen2_5_vl",
    recognition=Recognition(
        model_types=("internvl", "internvl_chat"), remote_code_types=("internvl_chat",)
    ),
    profile=Profile(
        projector=_projector,
        token_ids=_tokens,
        image_tokens=_image_tokens,
        hf_class="InternVLForConditionalGeneration",
        fields=fields.INTERNVL,
        text_placeholder=lambda kind, n: "<IMG_CONTEXT>\n",
        notes=_NOTES,
    ),
    package=INTERNVL_PACKAGE,
    reference=Reference(prepare=reference.prepare, from_runtime=reference.from_runtime),
    fixtures=Fixtures(tiny=tiny.INTERNVL, released=tiny.RELEASED_INTERNVL, expect=expect.INTERNVL),
)

REMOTE_CODE = (
    "this is InternVL's original remote-code layout (model_type internvl_chat: "
    "InternVLChatModel, fused qkv, mlp1.*), which transformers does not implement, so "
    "mmforge cannot verify a package of it. Convert the release's -hf checkpoint "
    "(e.g. OpenGVLab/InternVL3-1B-hf, model_type internvl) instead"
)

INTERNVL = dataclasses.replace(INTERNVL, earlier=earlier.earlier(INTERNVL))

INTERNVL_REMOTE = dataclasses.replace(
    INTERNVL,
    earlier=None,
    package=None,
    reference=None,
    fixtures=Fixtures(),
    exact_host="qwen2_5_vl",
    no_pipeline_reason=REMOTE_CODE,
)


def _variant(request: VariantRequest) -> Family | None:
    return INTERNVL_REMOTE if request.config.get("model_type") == "internvl_chat" else None


INTERNVL = dataclasses.replace(
    INTERNVL, recognition=dataclasses.replace(INTERNVL.recognition, variant=_variant)
)

FAMILIES = (INTERNVL,)
