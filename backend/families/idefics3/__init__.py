"""Idefics3 and SmolVLM (NaViT SigLIP, pixel-shuffle connector, Llama) on `videochat_flash_qwen`.

ONNX Runtime GenAI 0.18 has no `idefics3` or `smolvlm` type. Its `videochat_flash_qwen`
pipeline gives every picture a constant number of ids, `vision.num_visual_tokens` (K =
image_seq_len: 169 for Idefics3-8B, 64 for SmolVLM-256M / 500M, 81 for SmolVLM-Instruct),
and the package's template and tokenizer make of them exactly the processors' ids for a
picture that is not split, `<fake_token_around_image><global-img>` + K × `<image>` +
`<fake_token_around_image>` (tokenizer.py), with 1-D positions and a causal decoder, as
the models have. Pictures are sized as Idefics3ImageProcessor sizes them without
splitting (the longest side to `size.longest_edge`, then the `max_image_size` square,
both Lanczos) before the runtime sees them; its Resize to that square is then the
identity. The graphs: graphs.py (the tower is Idefics2's).

Exactly without image splitting only. The releases split (`do_image_splitting`, the
image processor's default too): a picture becomes a grid of tiles plus the whole picture,
a count and layout that follow the picture, which no 0.18 pipeline gives. Such a
checkpoint is this entry's variant that converts only as an approximation (each picture
read whole), with the user's consent (`SPLITTING`).
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
    as_int,
    ids,
)
from mmforge.backend.families._hooks import VariantRequest
from mmforge.backend.families.components.hosts.videochat import sized_pixels, videochat_package
from mmforge.backend.families.components.splitting import splits_pictures
from mmforge.backend.families.idefics3 import expect, fields, reference, tiny, tokenizer
from mmforge.backend.families.idefics3.graphs import (
    checkpoint_name,
    own_vision_and_embedding,
    scale,
    tokens_per_image,
)
from mmforge.backend.picture_sizing import EDGE_THEN_FIXED, Sizing, resample_name

IMAGENET_STANDARD = [0.5, 0.5, 0.5]


def _per_image(cfg: Cfg) -> int:
    try:
        return tokens_per_image(cfg)
    except MmforgeError:  # an inconsistent config: inspect still shows something
        return 0


def _projector(cfg: Cfg) -> Projector:
    s = scale(cfg)
    return Projector(
        "LinearMultiModalProjector",
        f"pixel shuffle ×{s} → Linear",
        f"Idefics3 shuffles each {s} × {s} block of patches into one row (scale_factor={s}), "
        "then one Linear to the text width",
        {"scale_factor": s},
    )


def _image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    per = _per_image(cfg)
    return ImageTokens(
        fixed=per,
        rule=f"{per} per picture without splitting, framed by <fake_token_around_image>"
        "<global-img> … <fake_token_around_image>",
    )


def _side(cfg: Cfg, pre: Cfg) -> int:
    """The picture's square side: max_image_size.longest_edge, which must be the tower's.

    Raises:
        MmforgeError: The processor's square is not the tower's image_size (transformers'
            processor would write another count than the tower gives).
    """
    tower = as_int(cfg.get("vision_config.image_size", 224))
    side = pre.get("max_image_size.longest_edge", 364)
    if not isinstance(side, int) or side != tower:
        raise MmforgeError(
            f"The image processor sizes pictures to {side} px squares, the vision tower's "
            f"are {tower} px",
            f"Set max_image_size.longest_edge to {tower} in preprocessor_config.json, as the "
            "releases have it",
        )
    return side


def _sizing(cfg: Cfg, pre: Cfg) -> Sizing:
    """Idefics3ImageProcessor without splitting: the longest edge, then the square."""
    side = _side(cfg, pre)
    first = pre.get("size.longest_edge", 4 * 364) if pre.get("do_resize", True) else 0
    resample = resample_name(pre.get("resample"), "lanczos")
    return Sizing(EDGE_THEN_FIXED, resample, longest_edge=int(first), width=side, height=side)


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """The square's pixel chain (`hosts.videochat.sized_pixels`: its Resize is the identity)."""
    side = _side(cfg, pre)
    return sized_pixels(
        "idefics3_image_processor", (side, side), pre, IMAGENET_STANDARD, IMAGENET_STANDARD
    )


def _tokens(cfg: Cfg) -> dict[str, int]:
    return ids(cfg, image_token_id="image_token_id")


IDEFICS3_PACKAGE = videochat_package(
    tokens_per_image,
    _tokens,
    processor_json=_processor,
    picture_sizing=_sizing,
    # mobius's `idefics3` / `smolvlm` graphs (its LLaVA model), vision and embedding ours.
    graph_fixes=(own_vision_and_embedding,),
    rename_checkpoint=checkpoint_name,
    adapt_tokenizer=tokenizer.adapt,
    notes=(
        "Idefics3 / SmolVLM run on ONNX Runtime GenAI's videochat_flash_qwen pipeline: a "
        "constant vision.num_visual_tokens <image> ids per picture (image_seq_len), after "
        "<fake_token_around_image><global-img> written by the chat template and closed by "
        "the runtime's marker read as <fake_token_around_image>, 1-D positions, a causal "
        "decoder (as the models).",
        "Pictures are sized as Idefics3ImageProcessor sizes them without splitting (the "
        "longest side to size.longest_edge, then the max_image_size square) before the "
        "runtime sees them; its Resize is then the identity.",
    ),
)

_NOTES = (
    "Runs on the runtime's videochat_flash_qwen pipeline (the runtime has no idefics3 or "
    "smolvlm type): K ids per picture, the same ids as transformers' processor without "
    "image splitting.",
)

IDEFICS3 = Family(
    key="idefics3",
    name="Idefics3",
    pipeline_type="videochat_flash_qwen",
    recognition=Recognition(model_types=("idefics3",)),
    profile=Profile(
        projector=_projector,
        token_ids=_tokens,
        image_tokens=_image_tokens,
        hf_class="Idefics3ForConditionalGeneration",
        fields=fields.IDEFICS3,
        text_placeholder=lambda kind, n: "<image>",
        notes=_NOTES,
    ),
    package=IDEFICS3_PACKAGE,
    reference=Reference(prepare=reference.prepare, from_runtime=reference.from_runtime),
    fixtures=Fixtures(tiny=tiny.IDEFICS3, released=tiny.RELEASED_IDEFICS3, expect=expect.IDEFICS3),
)

SMOLVLM = dataclasses.replace(
    IDEFICS3,
    key="smolvlm",
    name="SmolVLM",
    recognition=Recognition(model_types=("smolvlm",)),
    profile=dataclasses.replace(IDEFICS3.profile, hf_class="SmolVLMForConditionalGeneration"),
    fixtures=Fixtures(tiny=tiny.SMOLVLM, released=tiny.RELEASED_SMOLVLM, expect=expect.IDEFICS3),
)

SPLITTING = Approximation(
    what="Each picture is seen whole, as one small square, where this model as released "
    "also reads it as a grid of tiles at a higher resolution, so its answers may differ "
    "from the original's, most on small print and fine detail.",
    short="each picture seen whole, without its tiles",
    overrides={"do_image_splitting": False},
    why="This checkpoint's processor cuts each picture, first scaled to size.longest_edge, "
    "into a grid of max_image_size tiles plus the whole picture (do_image_splitting: "
    "image_seq_len image tokens a tile, up to 17 × 64 on SmolVLM-256M's 2,048 px, with "
    "<row_r_col_c> ids and a newline a row), a count and layout that follow the picture, "
    "which no ONNX Runtime GenAI 0.18 pipeline gives (docs/seed-families.md); the package "
    "reads the whole picture only, as the processor does without splitting. The two "
    "coincide only where size.longest_edge is at most max_image_size.longest_edge (one "
    "tile: the same pixels and ids, and such a checkpoint converts exactly), never with "
    "the releases' settings.",
)


def really_splits(folder: Any) -> bool:
    """Whether the processor splits pictures into more than one tile for some picture.

    do_image_splitting (Idefics3ImageProcessor's default: true), unless the first resize
    (size.longest_edge) is at most the tile (max_image_size.longest_edge): then every
    picture is one tile, and the processor's pixels and ids are those without splitting.
    """
    from mmforge.backend.untrusted import read_json_file

    if not splits_pictures(folder, default=True):
        return False
    path = folder / "preprocessor_config.json"
    data = read_json_file(path, path.name) if path.is_file() else {}
    pre = Cfg(data if isinstance(data, dict) else {})
    first, tile = pre.get("size.longest_edge", 4 * 364), pre.get("max_image_size.longest_edge", 364)
    return not (isinstance(first, int) and isinstance(tile, int) and first <= tile)


def _splitting(family: Family) -> Family:
    return dataclasses.replace(
        family,
        profile=dataclasses.replace(
            family.profile,
            image_tokens=lambda cfg, pre: ImageTokens(
                minimum=_per_image(cfg),
                rule=f"{_per_image(cfg)} a tile and for the whole picture (do_image_splitting: "
                "tiles by the picture's size); the package, an approximation, reads each "
                "picture whole",
            ),
        ),
        approximation=SPLITTING,
    )


IDEFICS3_SPLITTING = _splitting(IDEFICS3)
SMOLVLM_SPLITTING = _splitting(SMOLVLM)


def _variant_of(splitting: Family) -> Any:
    def variant(request: VariantRequest) -> Family | None:
        return splitting if really_splits(request.folder) else None

    return variant


RELEASES_SPLIT = (
    "The releases split their pictures into tiles (do_image_splitting), which no runtime "
    "pipeline takes: they convert only as an approximation, with your consent (each "
    "picture seen whole); a checkpoint that does not split converts exactly"
)
IDEFICS3 = dataclasses.replace(
    IDEFICS3,
    recognition=dataclasses.replace(IDEFICS3.recognition, variant=_variant_of(IDEFICS3_SPLITTING)),
    variant_note=RELEASES_SPLIT,
)
SMOLVLM = dataclasses.replace(
    SMOLVLM,
    recognition=dataclasses.replace(SMOLVLM.recognition, variant=_variant_of(SMOLVLM_SPLITTING)),
    variant_note=RELEASES_SPLIT,
)

FAMILIES = (IDEFICS3, SMOLVLM)
