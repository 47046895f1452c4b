"""LLaVA-1.5 (CLIP tower, Llama decoder) on ONNX Runtime GenAI's `videochat_flash_qwen`.

ONNX Runtime GenAI 0.18 has no `llava` type. Its `videochat_flash_qwen` pipeline gives
every picture a constant number of ids, `vision.num_visual_tokens` (K), framed by marker
text that the package's tokenizer reads as `<image>` ids (tokenizer.py): exactly
LlavaProcessor's K `<image>` ids, with 1-D positions and a plain causal decoder, as
LLaVA has. The graphs: graphs.py. What every family on that pipeline shares (package
fields, pixel chain, embedding graph): components/hosts/videochat.py.

`llava` is also Pixtral-12B's model_type; the registry hands it to the Pixtral entry
(mistral/pixtral.py), which claims only the checkpoints with a Pixtral tower: the
registry sends every other one here.
"""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._base import (
    CLIP_MEAN,
    CLIP_STD,
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
from mmforge.backend.families.components.hosts.videochat import (
    from_runtime,
    sized_pixels,
    videochat_package,
)
from mmforge.backend.families.llava import (
    expect,
    fields,
    llava_next,
    reference,
    tiny,
    tokenizer,
    video_llava,
    vipllava,
)
from mmforge.backend.families.llava.graphs import (
    checkpoint_name,
    feature_layers,
    keeps_class_token,
    own_vision_and_embedding,
    tokens_per_image,
    tower_size,
    unused_tensors,
)
from mmforge.backend.picture_sizing import FIXED, SHORTEST_EDGE_CROP, Sizing, resample_name


def _projector(cfg: Cfg) -> Projector:
    act = cfg.get("projector_hidden_act", "gelu")
    bias = bool(cfg.get("multimodal_projector_bias", True))
    layers = feature_layers(cfg)
    return Projector(
        "MLPMultiModalProjector",
        f"Linear → {str(act).upper()} → Linear",
        f"LLaVA reads the CLIP tower's hidden states {layers} "
        f"({'with' if keeps_class_token(cfg) else 'without'} the class token), then a "
        f"two-layer MLP (projector_hidden_act={act}, multimodal_projector_bias={bias})",
        {"projector_hidden_act": act, "multimodal_projector_bias": bias},
    )


def _image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    image = tower_size(cfg)
    patch = int(cfg.get("vision_config.patch_size", 14))
    strategy = cfg.get("vision_feature_select_strategy", "default")
    return ImageTokens(
        fixed=tokens_per_image(cfg),
        rule=f"({image}/{patch})² patches, vision_feature_select_strategy={strategy}",
    )


def _crop(cfg: Cfg, pre: Cfg) -> tuple[int, int]:
    """The pixels' (width, height): the processor's crop, else its size, else the tower's."""
    side = tower_size(cfg)
    crop = pre.get("crop_size")
    if pre.get("do_center_crop", True) and isinstance(crop, dict):
        return int(crop.get("width", side)), int(crop.get("height", side))
    if pre.get("do_center_crop", True) and isinstance(crop, int):  # older configs
        return crop, crop
    size = pre.get("size")
    if isinstance(size, dict) and "height" in size:
        return int(size.get("width", side)), int(size["height"])
    return side, side


def _sizing(cfg: Cfg, pre: Cfg) -> Sizing:
    """CLIPImageProcessor: shortest edge then centre crop (or a fixed size, as configured)."""
    width, height = _crop(cfg, pre)
    resample = resample_name(pre.get("resample"), "bicubic")
    size = pre.get("size")
    edge = size.get("shortest_edge") if isinstance(size, dict) else size
    if isinstance(edge, int) and pre.get("do_center_crop", True):
        return Sizing(SHORTEST_EDGE_CROP, resample, shortest_edge=edge, width=width, height=height)
    return Sizing(FIXED, resample, width=width, height=height)


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """CLIPImageProcessor's size (`sized_pixels`)."""
    return sized_pixels("llava_clip_image_processor", _crop(cfg, pre), pre, CLIP_MEAN, CLIP_STD)


def _tokens(cfg: Cfg) -> dict[str, int]:
    return ids(cfg, image_token_id=("image_token_index", "image_token_id"))


LLAVA_PACKAGE = videochat_package(
    tokens_per_image,
    _tokens,
    processor_json=_processor,
    picture_sizing=_sizing,
    # mobius's `llava` graphs, their vision tower and embedding replaced by ours.
    graph_fixes=(own_vision_and_embedding,),
    rename_checkpoint=checkpoint_name,
    unused_ok=unused_tensors,
    adapt_tokenizer=tokenizer.adapt,
    notes=(
        "LLaVA runs on ONNX Runtime GenAI's videochat_flash_qwen pipeline: a constant "
        "vision.num_visual_tokens ids per picture, its marker text read as <image> ids by "
        "the package's tokenizer, 1-D positions, a causal decoder (as LLaVA).",
        "Pictures are sized as CLIPImageProcessor sizes them (shortest edge, centre crop) "
        "before the runtime sees them; its Resize is then the identity.",
    ),
)

LLAVA = Family(
    key="llava",
    name="LLaVA",
    pipeline_type="videochat_flash_qwen",
    recognition=Recognition(model_types=("llava",)),
    profile=Profile(
        projector=_projector,
        token_ids=_tokens,
        image_tokens=_image_tokens,
        hf_class="LlavaForConditionalGeneration",
        fields=fields.LLAVA,
        text_placeholder=lambda kind, n: "<image>\n",
        notes=(
            "Runs on the runtime's videochat_flash_qwen pipeline (the runtime has no llava "
            "type): K ids per picture, the same ids as transformers' LlavaProcessor.",
        ),
    ),
    package=LLAVA_PACKAGE,
    reference=Reference(prepare=reference.prepare, from_runtime=from_runtime),
    fixtures=Fixtures(tiny=tiny.LLAVA, released=tiny.RELEASED_LLAVA, expect=expect.LLAVA),
)

# VipLLaVA (model_type vipllava): the same package, five tower layers concatenated.
VIPLLAVA = vipllava.make(LLAVA)

# Video-LLaVA (model_type video_llava): the same package for pictures, K = 256 at 224 px.
VIDEO_LLAVA = video_llava.make(LLAVA)

# LLaVA-NeXT (model_type llava_next): the same tower and decoder, anyres pictures on the
# qwen2_5_vl pipeline.
LLAVA_NEXT = llava_next.make(LLAVA)

FAMILIES = (LLAVA, VIPLLAVA, VIDEO_LLAVA, LLAVA_NEXT)
