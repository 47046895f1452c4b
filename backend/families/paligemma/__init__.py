"""PaliGemma (SigLIP tower, one Linear, Gemma decoder) on the runtime's videochat_flash_qwen."""

from __future__ import annotations

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
    ids,
    square_processor,
)
from mmforge.backend.families.paligemma import expect, fields, reference, tiny
from mmforge.backend.families.paligemma.build import build
from mmforge.backend.families.paligemma.graphs import canonical_name, image_tokens
from mmforge.backend.families.paligemma.tokens import PACKAGE_TEMPLATE, adapt_tokenizer
from mmforge.backend.picture_sizing import FIXED, Sizing, resample_name


def _size(cfg: Cfg, pre: Cfg) -> int:
    return int(pre.first("size.height", default=cfg.get("vision_config.image_size", 224)))


def _projector(cfg: Cfg) -> Projector:
    dim = cfg.get("vision_config.projection_dim", cfg.get("projection_dim"))
    return Projector(
        "LinearMultiModalProjector",
        "Linear",
        f"PaliGemma maps vision features to the text width with a single Linear "
        f"(vision_config.projection_dim={dim})",
        {"vision_config.projection_dim": dim},
    )


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """SiglipImageProcessor's square resize, rescale and 0.5 normalisation.

    Chat and verify hand the runtime pictures already at this size (picture_sizing), so
    the runtime's Resize leaves them as they are.
    """
    return square_processor("paligemma_image_processor", _size(cfg, pre), pre, resample=3)


def _sizing(cfg: Cfg, pre: Cfg) -> Sizing:
    """SiglipImageProcessor's fixed square size (the aspect is not kept), bicubic."""
    size = _size(cfg, pre)
    return Sizing(
        rule=FIXED, resample=resample_name(pre.get("resample"), "bicubic"), width=size, height=size
    )


PALIGEMMA_PACKAGE = PackageSpec(
    model_fields=lambda cfg: ids(cfg, image_token_id=("image_token_index", "image_token_id")),
    vision_fields=lambda cfg, pre: {"num_visual_tokens": image_tokens(cfg)},
    vision_inputs={"pixel_values": "pixel_values"},
    processor_json=_processor,
    picture_sizing=_sizing,
    rename_checkpoint=canonical_name,
    build=build,
    adapt_tokenizer=adapt_tokenizer,
    chat_template=PACKAGE_TEMPLATE,
    # PaliGemma takes the SigLIP tower's last hidden state: the pooling head is never run.
    unused_ok=lambda cfg: (r"vision_tower\.(vision_model\.)?head\.",),
    # f16 packages come from mobius's f16 build (convert/graphs.py); these graphs are f32.
    dtypes=("f32", "int4"),
    notes=(
        "Graphs: all three are mmforge's own (mobius 0.1 builds PaliGemma as a LLaVA with "
        "an MLP projector and a Llama decoder).",
        "Runs on ONNX Runtime GenAI's videochat_flash_qwen pipeline: a constant "
        "vision.num_visual_tokens per picture; the package's tokenizer absorbs the "
        "<|vision_start|>/<|vision_end|> text the runtime splices in.",
        "The decoder lets the whole prompt attend both ways while its cache is empty and "
        "counts positions from 1, as transformers' PaliGemma; keep search.chunk_size unset.",
        "Chat template: mmforge's, derived from transformers' PaliGemmaProcessor prompt "
        "format (a picture marker per picture, <bos>, the prefix, a newline), not shipped "
        "by the release: PaliGemma's releases ship none, and a template a checkpoint does "
        "ship is not used by the package.",
        "PaliGemma is not a chat model: the package's template takes one user message "
        "(pictures and a prefix) and refuses a second turn or a system prompt.",
    ),
)

PALIGEMMA = Family(
    key="paligemma",
    name="PaliGemma",
    pipeline_type="videochat_flash_qwen",
    recognition=Recognition(model_types=("paligemma",)),
    profile=Profile(
        projector=_projector,
        token_ids=lambda cfg: ids(cfg, image_token_id=("image_token_index", "image_token_id")),
        image_tokens=lambda cfg, pre: ImageTokens(
            fixed=image_tokens(cfg), rule="(image_size/patch_size)², all prefix tokens"
        ),
        hf_class="PaliGemmaForConditionalGeneration",
        fields=fields.PALIGEMMA,
        notes=(
            "The whole prompt (pictures and prefix) attends bidirectionally (prefix-LM "
            "mask); generated tokens are causal.",
            "One user message per conversation: PaliGemma's prompt has no turns.",
            "The releases ship no chat template: transformers' PaliGemmaProcessor writes the "
            "prompt, the package's template is derived from it, and verify compares with "
            "the processor itself.",
        ),
    ),
    package=PALIGEMMA_PACKAGE,
    reference=Reference(
        prepare=reference.prepare,
        from_runtime=reference.from_runtime,
        untemplated=reference.from_processor,
    ),
    fixtures=Fixtures(
        tiny=tiny.PALIGEMMA, released=tiny.RELEASED_PALIGEMMA, expect=expect.PALIGEMMA
    ),
)

FAMILIES = (PALIGEMMA,)
