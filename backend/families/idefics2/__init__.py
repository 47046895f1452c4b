"""Idefics2 (NaViT SigLIP tower, perceiver connector, Mistral decoder) on `videochat_flash_qwen`.

ONNX Runtime GenAI 0.18 has no `idefics2` type. Its `videochat_flash_qwen` pipeline gives
every picture a constant number of ids, `vision.num_visual_tokens` (K = the perceiver's
64 latents), framed by marker text that the package's tokenizer reads as Idefics2's
`<fake_token_around_image>` and `<image>` ids (tokenizer.py): exactly Idefics2Processor's
ids, with 1-D positions and a causal decoder, as Idefics2 has. Pictures are sized as
Idefics2ImageProcessor sizes them before the runtime sees them and packed on a canvas of
one size with their own size in a header row (the package's pixel chain has no Resize),
so the vision graph (graphs.py) cuts each out at that size, and a prompt's pictures may
differ in size.

A checkpoint whose processor splits pictures (`do_image_splitting`: the four quarters
and the whole, 5 × K image ids) is this entry's variant: the intake packs the five parts
into one canvas a picture, the vision graph runs the tower and connector on each part,
and the embedding graph writes the fake token between them (graphs.py), so the runtime's
prompt is transformers' (K' = 5 K + 4 ids a picture).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.families._base import (
    Cfg,
    Family,
    Fixtures,
    ImageTokens,
    Profile,
    Projector,
    Recognition,
    Reference,
    ids,
    processor_op,
    rescale_and_normalize,
)
from mmforge.backend.families._hooks import VariantRequest
from mmforge.backend.families.components.hosts.videochat import videochat_package
from mmforge.backend.families.components.splitting import splits_pictures
from mmforge.backend.families.idefics2 import expect, fields, reference, tiny, tokenizer
from mmforge.backend.families.idefics2.graphs import (
    PARTS,
    checkpoint_name,
    feature_rows,
    own_split_graphs,
    own_vision_and_embedding,
    split_tokens,
    tokens_per_image,
)
from mmforge.backend.picture_sizing import (
    CANVAS_EDGE_BOUNDS,
    SPLIT_EDGE_BOUNDS,
    Sizing,
    resample_name,
)

IMAGENET_STANDARD = [0.5, 0.5, 0.5]
SHORTEST_EDGE, LONGEST_EDGE = 378, 980  # Idefics2ImageProcessor's defaults


def _projector(cfg: Cfg) -> Projector:
    latents = tokens_per_image(cfg)
    return Projector(
        "LinearMultiModalProjector",
        "MLP modality projection → perceiver resampler",
        "Idefics2 projects with its modality projection, then a perceiver resampler to "
        f"resampler_n_latents={latents}",
        {"perceiver_config.resampler_n_latents": latents},
    )


def _image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    return ImageTokens(
        fixed=tokens_per_image(cfg),
        rule="resampler_n_latents per picture (5 × that with do_image_splitting), framed "
        "by <fake_token_around_image>",
    )


def _edges(pre: Cfg) -> tuple[int, int]:
    shortest = pre.get("size.shortest_edge", SHORTEST_EDGE)
    longest = pre.get("size.longest_edge", LONGEST_EDGE)
    return int(shortest), int(longest)


def _sizing(cfg: Cfg, pre: Cfg) -> Sizing:
    """Idefics2ImageProcessor: the longest side down to longest_edge, sides up to shortest_edge.

    The picture so sized reaches the runtime on a canvas of one size for every picture
    (picture_sizing.CANVAS_EDGE_BOUNDS), so a prompt's pictures may differ in size.
    """
    shortest, longest = _edges(pre)
    resample = resample_name(pre.get("resample"), "bilinear")
    return Sizing(CANVAS_EDGE_BOUNDS, resample, shortest_edge=shortest, longest_edge=longest)


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """The runtime's pixel chain: rescale, normalise, CHW, and no Resize.

    The intake already sized the picture as transformers does (`_sizing`), to a size no
    `Resize` op expresses, and packed it (or its five parts) on a canvas, which reaches
    the vision graph as it is.
    """
    return {
        "processor": {
            "name": "idefics2_image_processor",
            "transforms": [
                processor_op("decode_image", "DecodeImage", {"color_space": "RGB"}),
                *rescale_and_normalize(pre, IMAGENET_STANDARD, IMAGENET_STANDARD),
                processor_op("to_channel_first", "Permute3D", {"dims": [2, 0, 1]}),
            ],
        }
    }


def _tokens(cfg: Cfg) -> dict[str, int]:
    return ids(cfg, image_token_id="image_token_id")


IDEFICS2_PACKAGE = videochat_package(
    tokens_per_image,
    _tokens,
    processor_json=_processor,
    picture_sizing=_sizing,
    # mobius's `idefics2` graphs (its LLaVA model), the vision and embedding replaced by ours.
    graph_fixes=(own_vision_and_embedding,),
    rename_checkpoint=checkpoint_name,
    adapt_tokenizer=tokenizer.adapt,
    notes=(
        "Idefics2 runs on ONNX Runtime GenAI's videochat_flash_qwen pipeline: a constant "
        "vision.num_visual_tokens ids per picture (the perceiver's latents), its marker "
        "text read as <fake_token_around_image> and <image> ids by the package's "
        "tokenizer, 1-D positions, a causal decoder (as Idefics2).",
        "Pictures are sized as Idefics2ImageProcessor sizes them before the runtime sees "
        "them, each on a canvas of one size with its own size in a header row (the "
        "package's pixel chain has no Resize); the vision graph cuts it out, so a prompt's "
        "pictures may differ in size, as transformers pads and masks them.",
    ),
)

_NOTES = (
    "Runs on the runtime's videochat_flash_qwen pipeline (the runtime has no idefics2 "
    "type): K ids per picture, the same ids as transformers' Idefics2Processor.",
)

IDEFICS2 = Family(
    key="idefics2",
    name="Idefics2",
    pipeline_type="videochat_flash_qwen",
    recognition=Recognition(model_types=("idefics2",)),
    profile=Profile(
        projector=_projector,
        token_ids=_tokens,
        image_tokens=_image_tokens,
        hf_class="Idefics2ForConditionalGeneration",
        fields=fields.IDEFICS2,
        text_placeholder=lambda kind, n: "<image>",
        notes=_NOTES,
    ),
    package=IDEFICS2_PACKAGE,
    reference=Reference(prepare=reference.prepare, from_runtime=reference.from_runtime),
    fixtures=Fixtures(tiny=tiny.IDEFICS2, released=tiny.RELEASED_IDEFICS2, expect=expect.IDEFICS2),
)


def _split_sizing(cfg: Cfg, pre: Cfg) -> Sizing:
    """Idefics2ImageProcessor with splitting: the quarters and the whole, each as `_sizing`."""
    shortest, longest = _edges(pre)
    resample = resample_name(pre.get("resample"), "bilinear")
    return Sizing(SPLIT_EDGE_BOUNDS, resample, shortest_edge=shortest, longest_edge=longest)


IDEFICS2_SPLIT_PACKAGE = videochat_package(
    split_tokens,
    _tokens,
    processor_json=_processor,
    picture_sizing=_split_sizing,
    graph_fixes=(own_split_graphs,),
    rename_checkpoint=checkpoint_name,
    adapt_tokenizer=tokenizer.adapt,
    notes=(
        "Idefics2 with image splitting runs on ONNX Runtime GenAI's videochat_flash_qwen "
        "pipeline: vision.num_visual_tokens = 5 K + 4 ids a picture, its marker text read "
        "as <fake_token_around_image> and <image> ids; the embedding graph puts the fake "
        "token's embedding between the five parts, so the decoder gets Idefics2Processor's "
        "sequence.",
        "Pictures are cut and sized as Idefics2ImageProcessor does before the runtime sees "
        "them, and packed into one canvas a picture (its four quarters, the whole, and their "
        "sizes); the vision graph runs the tower and connector on each part at its own size.",
    ),
)


# A splitting checkpoint: five parts a picture, exactly as Idefics2ImageProcessor cuts it.
IDEFICS2_SPLITTING = dataclasses.replace(
    IDEFICS2,
    profile=dataclasses.replace(
        IDEFICS2.profile,
        image_tokens=lambda cfg, pre: ImageTokens(
            fixed=PARTS * tokens_per_image(cfg),
            rule="5 × resampler_n_latents per picture (do_image_splitting: the four "
            "quarters and the whole), each framed by <fake_token_around_image>",
        ),
        notes=(
            *_NOTES,
            "Splits each picture as its processor does (do_image_splitting): the four "
            "quarters and the whole, five parts of K ids; the runtime's K' = 5 K + 4 ids a "
            "picture, the four between the parts written as <fake_token_around_image> by "
            "the embedding graph.",
        ),
    ),
    package=IDEFICS2_SPLIT_PACKAGE,
    reference=Reference(
        prepare=reference.prepare,
        from_runtime=reference.from_runtime_split,
        feature_rows=feature_rows,
    ),
)


def _variant(request: VariantRequest) -> Family | None:
    return IDEFICS2_SPLITTING if splits_pictures(request.folder) else None


IDEFICS2 = dataclasses.replace(
    IDEFICS2,
    recognition=dataclasses.replace(IDEFICS2.recognition, variant=_variant),
    variant_note="A checkpoint that splits its pictures (do_image_splitting) converts with "
    "its splitting: the four quarters and the whole, five parts a picture",
)

FAMILIES = (IDEFICS2,)
