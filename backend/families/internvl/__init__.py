"""InternVL 3 / 3.5 (InternViT, Qwen2 or Qwen3 decoder) on `videochat_flash_qwen`.

ONNX Runtime GenAI 0.18 has no `internvl` type. Its `videochat_flash_qwen` pipeline gives
every picture a constant number of ids, `vision.num_visual_tokens` (K = 256 for a 448 ×
448 view: (448/14)² patches, pixel-shuffled by 2 × 2), framed by marker text that the
package's tokenizer reads as InternVL's `<img>`, `<IMG_CONTEXT>` and `</img>` ids
(tokenizer.py), with 1-D positions and a causal decoder, as InternVL has. Pictures are
resized to 448 × 448 (bicubic) as GotOcr2ImageProcessor resizes them without tiling,
before the runtime sees them. The graphs: graphs.py.

Only as an approximation, with the user's consent (`CROP_TO_PATCHES`): transformers'
InternVLProcessor tiles by default (its processor default `crop_to_patches: True`
outranks the image processor's own setting), giving a picture 256 × (1 + tiles) ids by
its aspect ratio, a count no 0.18 pipeline gives. The package sees each picture whole, as
InternVLProcessor does with crop_to_patches=False, which the approximation's overrides
give the checkpoint's processor settings and verify's reference.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import (
    Approximation,
    Cfg,
    Family,
    Fixtures,
    ImageTokens,
    Profile,
    Projector,
    Recognition,
    Reference,
    ids,
)
from mmforge.backend.families._hooks import VariantRequest
from mmforge.backend.families.components.hosts.videochat import (
    from_runtime,
    sized_pixels,
    videochat_package,
)
from mmforge.backend.families.internvl import expect, fields, reference, tiny, tokenizer
from mmforge.backend.families.internvl.graphs import (
    checkpoint_name,
    checkpoint_names,
    int_sizes,
    own_vision_and_embedding,
    tokens_per_image,
    unused_tensors,
    view_size,
)
from mmforge.backend.picture_sizing import FIXED, Sizing, resample_name

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


def _image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    per = _per_view(cfg)
    tiles = int(pre.get("max_patches", 12))
    return ImageTokens(
        fixed=per,
        rule=f"{per} per 448 px view, one view a picture in the package; transformers' "
        f"InternVLProcessor tiles (crop_to_patches): {per} × (1 + tiles), up to {tiles} tiles "
        "plus a thumbnail",
    )


def _side(cfg: Cfg, pre: Cfg) -> tuple[int, int]:
    """The view's (width, height): the processor's size, which must be the tower's.

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
    return side, side


def _sizing(cfg: Cfg, pre: Cfg) -> Sizing:
    """GotOcr2ImageProcessor without tiling: one resize to size.height × size.width."""
    width, height = _side(cfg, pre)
    return Sizing(FIXED, resample_name(pre.get("resample"), "bicubic"), width=width, height=height)


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """GotOcr2ImageProcessor's size (`hosts.videochat.sized_pixels`), ImageNet's mean and std."""
    return sized_pixels(
        "internvl_image_processor", _side(cfg, pre), pre, IMAGENET_MEAN, IMAGENET_STD
    )


def _tokens(cfg: Cfg) -> dict[str, int]:
    return ids(cfg, image_token_id="image_token_id")


INTERNVL_PACKAGE = videochat_package(
    tokens_per_image,
    _tokens,
    processor_json=_processor,
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
        "InternVL runs on ONNX Runtime GenAI's videochat_flash_qwen pipeline: a constant "
        "vision.num_visual_tokens ids per picture (256 for one 448 × 448 view), its marker "
        "text read as <img>, <IMG_CONTEXT> and </img> by the package's tokenizer, 1-D "
        "positions, a causal decoder (as InternVL).",
        "Pictures are resized to 448 × 448 (bicubic) as GotOcr2ImageProcessor does without "
        "tiling, before the runtime sees them; its Resize is then the identity.",
    ),
)

_NOTES = (
    "Runs on the runtime's videochat_flash_qwen pipeline (the runtime has no internvl "
    "type): 256 ids per picture, one 448 × 448 view, where transformers' "
    "InternVLProcessor tiles a picture by default (crop_to_patches).",
)

# InternVLProcessor's own default (processing_internvl.py, images_kwargs) outranks the
# image processor's setting (processing_utils.py, _merge_kwargs), so every release tiles
# unless the caller says otherwise: the package is an approximation of every checkpoint.
CROP_TO_PATCHES = Approximation(
    what="Each picture is seen whole, as one 448 × 448 view, where this model as released "
    "also cuts larger or oblong pictures into up to 12 tiles, so its answers may differ "
    "from the original's, most on small print and fine detail. Near-square pictures up to "
    "about 634 × 634 pixels are seen the same either way.",
    short="each picture seen whole, not cut into tiles",
    overrides={"crop_to_patches": False},
    why="transformers' InternVLProcessor cuts each picture into up to max_patches (12) "
    "tiles of 448 px plus a thumbnail (crop_to_patches, 256 image tokens a view), and no "
    "ONNX Runtime GenAI 0.18 pipeline gives that count, 256 × (1 + tiles) by the "
    "picture's aspect ratio (docs/seed-families.md). A picture whose closest tile grid is "
    "1 × 1 (width/height between 0.875 and 1.167, under about 634 × 634 pixels) gives the "
    "same pixels either way (measured).",
)

INTERNVL = Family(
    key="internvl",
    name="InternVL",
    pipeline_type="videochat_flash_qwen",
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
    # The runtime's pixels, [1, N, 3, H, W], as HF's [N, 3, H, W]: as LLaVA's.
    reference=Reference(prepare=reference.prepare, from_runtime=from_runtime),
    fixtures=Fixtures(tiny=tiny.INTERNVL, released=tiny.RELEASED_INTERNVL, expect=expect.INTERNVL),
    approximation=CROP_TO_PATCHES,
)

REMOTE_CODE = (
    "this is InternVL's original remote-code layout (model_type internvl_chat: "
    "InternVLChatModel, fused qkv, mlp1.*), which transformers does not implement, so "
    "mmforge cannot verify a package of it. Convert the release's -hf checkpoint "
    "(e.g. OpenGVLab/InternVL3-1B-hf, model_type internvl) instead"
)

INTERNVL_REMOTE = dataclasses.replace(
    INTERNVL,
    approximation=None,
    package=None,
    reference=None,
    fixtures=Fixtures(),
    exact_host="videochat_flash_qwen",
    no_pipeline_reason=REMOTE_CODE,
)


def _variant(request: VariantRequest) -> Family | None:
    return INTERNVL_REMOTE if request.config.get("model_type") == "internvl_chat" else None


INTERNVL = dataclasses.replace(
    INTERNVL, recognition=dataclasses.replace(INTERNVL.recognition, variant=_variant)
)

FAMILIES = (INTERNVL,)
