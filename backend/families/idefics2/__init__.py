"""Idefics2 (NaViT SigLIP tower, perceiver connector, Mistral decoder) on `videochat_flash_qwen`.

ONNX Runtime GenAI 0.18 has no `idefics2` type. Its `videochat_flash_qwen` pipeline gives
every picture a constant number of ids, `vision.num_visual_tokens` (K = the perceiver's
64 latents), framed by marker text that the package's tokenizer reads as Idefics2's
`<fake_token_around_image>` and `<image>` ids (tokenizer.py): exactly Idefics2Processor's
ids, with 1-D positions and a causal decoder, as Idefics2 has. Pictures are sized as
Idefics2ImageProcessor sizes them before the runtime sees them, and the package's pixel
chain has no Resize, so the vision graph (graphs.py) gets them at that size.

Exactly without image splitting only: a checkpoint whose processor splits pictures
(`do_image_splitting`, 5 × 64 ids and four sub-images per picture) is this entry's
variant that converts only as an approximation (each picture read whole), with the
user's consent (`Family.approximation`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

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
    processor_op,
    rescale_and_normalize,
)
from mmforge.backend.families._hooks import VariantRequest
from mmforge.backend.families.idefics2 import expect, fields, reference, tiny, tokenizer
from mmforge.backend.families.idefics2.graphs import (
    checkpoint_name,
    own_vision_and_embedding,
    tokens_per_image,
)
from mmforge.backend.families.llava import videochat_package
from mmforge.backend.picture_sizing import EDGE_BOUNDS, Sizing, resample_name

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
    """Idefics2ImageProcessor: the longest side down to longest_edge, sides up to shortest_edge."""
    shortest, longest = _edges(pre)
    resample = resample_name(pre.get("resample"), "bilinear")
    return Sizing(EDGE_BOUNDS, resample, shortest_edge=shortest, longest_edge=longest)


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """The runtime's pixel chain: rescale, normalise, CHW, and no Resize.

    The intake already sized the picture as transformers does (`_sizing`), to a size no
    `Resize` op expresses, so the picture reaches the vision graph at that size.
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
        "them; the package's pixel chain has no Resize, so a prompt's pictures must share "
        "one size (transformers pads different sizes into one tensor; the runtime cannot).",
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

SPLITTING = Approximation(
    what="Each picture is read whole, where this model as released also reads it as four "
    "crops, so its answers may differ from the original's, most on small print and fine "
    "detail.",
    short="each picture read whole, without its four crops",
    overrides={"do_image_splitting": False},
    why="This checkpoint's processor cuts every picture into four crops plus the whole "
    "(do_image_splitting: 5 × 64 image tokens), which mmforge does not build yet; ONNX "
    "Runtime GenAI 0.18's videochat_flash_qwen pipeline could run the cut exactly with "
    "vision.num_visual_tokens = 324 (measured; docs/seed-families.md).",
)


def splits_pictures(folder: Any, default: bool = False) -> bool:
    """Whether the checkpoint's image processor splits pictures (do_image_splitting).

    Read from preprocessor_config.json, else processor_config.json's image_processor
    block; absent: `default`, Idefics2ImageProcessor's (false; Idefics3's is true). A
    file that cannot be read is refused (MmforgeError) rather than taken as false: that
    would convert a splitting model without its splitting.
    """
    from mmforge.backend.untrusted import read_json_file

    for name, block in (
        ("preprocessor_config.json", None),
        ("processor_config.json", "image_processor"),
    ):
        path = folder / name
        if not path.is_file():
            continue
        data = read_json_file(path, name)
        if block is not None:
            data = data.get(block) if isinstance(data, dict) else None
        if not isinstance(data, dict):
            return False
        return bool(data.get("do_image_splitting", default) is True)
    return default


# A splitting checkpoint converts without its splitting, only if the user agrees.
IDEFICS2_SPLITTING = dataclasses.replace(
    IDEFICS2,
    profile=dataclasses.replace(
        IDEFICS2.profile,
        image_tokens=lambda cfg, pre: ImageTokens(
            fixed=5 * tokens_per_image(cfg),
            rule="5 × resampler_n_latents per picture (do_image_splitting: four crops and "
            "the picture); the package, an approximation, reads each picture whole",
        ),
    ),
    approximation=SPLITTING,
)


def _variant(request: VariantRequest) -> Family | None:
    return IDEFICS2_SPLITTING if splits_pictures(request.folder) else None


IDEFICS2 = dataclasses.replace(
    IDEFICS2,
    recognition=dataclasses.replace(IDEFICS2.recognition, variant=_variant),
    variant_note="A checkpoint that splits its pictures (do_image_splitting) converts only as "
    "an approximation, with your consent (each picture read whole)",
)

FAMILIES = (IDEFICS2,)
