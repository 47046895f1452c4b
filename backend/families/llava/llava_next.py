"""LLaVA-NeXT (llava_next), exact, on ONNX Runtime GenAI's `qwen2_5_vl` pipeline.

LLaVA-1.5's CLIP tower, projector and decoder (graphs.py, mobius's `llava` decoder), with
LlavaNextImageProcessor's anyres pictures: a base view and tiles from the best of
`image_grid_pinpoints`, the tiles' features kept where the picture lies and each kept row
ended with `image_newline` (g² + rows·(cols + 1) ids a picture). The runtime's Qwen
processor counts each picture it is handed (merge 1, its patch side `anyres.PATCH`), so
every picture reaches it as two blocks (backend/anyres.py: the intake stacks them, the
runtime layer splits them, the chat template writes two `<|vision_start|>` a picture),
and this vision graph reads each block's header, makes the views again and keeps exactly
the block's features. Positions are 1-D, as LLaVA's: the M-RoPE ids genai_config names are
an id no tokenizer produces (the vocabulary size; absent ones read as 0, which makes "!!"
a picture), and the pad id too, so a typed `<pad>` is not masked (measured,
tests/backend/test_varcount_host.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from mmforge.backend import anyres
from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import (
    CLIP_MEAN,
    CLIP_STD,
    Cfg,
    Family,
    Fixtures,
    ImageTokens,
    PackageSpec,
    Recognition,
    Reference,
)
from mmforge.backend.families._fields import check, only
from mmforge.backend.families._graph_edit import name_decoder_weights
from mmforge.backend.families._hooks import FixRequest, ReferenceRequest, RuntimeArrays
from mmforge.backend.families._reference import ReferenceInputs, image_processor
from mmforge.backend.families.components.graph_builder import GraphBuilder
from mmforge.backend.families.components.hosts.qwen import qwen_chain
from mmforge.backend.families.components.tokens import bos_written, read_as
from mmforge.backend.families.llava import fields as llava_fields
from mmforge.backend.families.llava import graphs, tokenizer
from mmforge.backend.picture_sizing import ANYRES, Sizing, resample_name

# Each picture is two runtime pictures: the base view's block, then the tiles'.
MARKERS = tokenizer.MARKER * 2
# The runtime's marker text as `<image>` ids; the first is a one-patch block whole.
ABSORBED = ("<|vision_start|><|image_pad|><|vision_end|>", *tokenizer.ABSORBED)


def side(cfg: Cfg) -> int:
    """The tower's picture side: the base view's, and each tile's."""
    return graphs.tower_size(cfg)


def pinpoints(cfg: Cfg) -> list[tuple[int, int]]:
    """config.json's `image_grid_pinpoints` (transformers' default where it has none)."""
    value = cfg.get("image_grid_pinpoints") or [[336, 672], [672, 336], [672, 672], [1008, 336],
                                                 [336, 1008]]  # fmt: skip
    return [(int(h), int(w)) for h, w in value]


def _pinpoints_ok(value: Any, cfg: Cfg) -> bool:
    s = side(cfg)
    return (
        isinstance(value, list)
        and 0 < len(value) <= 64
        and all(
            isinstance(p, list)
            and len(p) == 2
            and all(type(v) is int and 0 < v <= 8192 and v % s == 0 for v in p)
            for p in value
        )
    )


FIELDS = (
    *(
        r
        for r in llava_fields.LLAVA
        if r.path not in ("vision_feature_select_strategy", "text_config.model_type")
    ),
    only(
        "text_config.model_type",
        "llama",
        "mistral",
        note="Vicuna's and Yi's Llama, Mistral-7B-v0.2 (no sliding window): one decoder",
    ),
    check(
        "text_config.sliding_window",
        lambda value, cfg: value is None,
        "none (every position attends to all before it)",
        note="Mistral-7B-Instruct-v0.2, LLaVA-NeXT's, has none",
    ),
    only(
        "vision_feature_select_strategy",
        "default",
        note="the class token dropped: LlavaNextModel lays each tile's features on a grid",
    ),
    check(
        "image_grid_pinpoints",
        _pinpoints_ok,
        "sizes (height, width) in whole tower squares",
        note="the grids a picture is fitted into (the processor's and the model's)",
    ),
)


def _check(cfg: Cfg, pre: Cfg) -> None:
    """Refuse what the package cannot make exactly (transformers would disagree with itself)."""
    s = side(cfg)
    theirs = pre.get("image_grid_pinpoints")
    if theirs is not None and [tuple(p) for p in theirs] != pinpoints(cfg):
        raise MmforgeError(
            "preprocessor_config.json's image_grid_pinpoints differ from config.json's",
            "transformers' processor and model would count the pictures differently",
        )
    crop = pre.get("crop_size")
    tile = int(crop.get("height", s)) if isinstance(crop, dict) else s
    size = pre.get("size")
    base = size.get("height") or size.get("shortest_edge") if isinstance(size, dict) else s
    if tile != s or int(base or s) != s:
        raise MmforgeError(
            f"the processor's tiles ({tile} px) or base view ({base} px) are not the tower's "
            f"{s} px square",
            "This checkpoint's preprocessor_config.json is not a LLaVA-NeXT release's",
        )


def _sizing(cfg: Cfg, pre: Cfg) -> Sizing:
    _check(cfg, pre)
    s = side(cfg)
    return Sizing(
        ANYRES,
        resample_name(pre.get("resample"), "bicubic"),
        factor=s,
        patch=int(cfg.get("vision_config.patch_size", 14)),
        width=s,
        height=s,
        pinpoints=tuple(pinpoints(cfg)),
    )


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """The Qwen chain without a Resize: the blocks' pixels as they are, patched by PATCH."""
    return qwen_chain(pre, CLIP_MEAN, CLIP_STD, anyres.PATCH)


def _tokens(cfg: Cfg) -> dict[str, int]:
    """The image id, and the guard (the vocabulary size) for every id the runtime reads.

    Qwen2VLPositionInputs makes 3-D positions at a vision_start id followed by the image
    id; with vision_start never produced, every position is 1-D, as LLaVA's.
    """
    image = cfg.first("image_token_index", "image_token_id")
    if not isinstance(image, int):
        raise ValueError("config.json has no image_token_index")
    guard = int(cfg.text.get("vocab_size"))
    return {
        "image_token_id": image,
        "vision_start_token_id": guard,
        "video_token_id": guard,
        "pad_token_id": guard,
    }


def _image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    s, g = side(cfg), side(cfg) // int(cfg.get("vision_config.patch_size", 14))
    most = max((h // s) * (w // s) for h, w in pinpoints(cfg))
    widest = max(w // s for _, w in pinpoints(cfg))
    return ImageTokens(
        minimum=g * g + 2,
        maximum=g * g + most * g * g + g * max(h // s for h, _ in pinpoints(cfg)),
        rule=(
            f"anyres: a {g}×{g} base view, then the tiles' features where the picture lies "
            f"(up to {most} tiles, {widest * g} a row), each row ended with a newline"
        ),
    )


def vision_graph(cfg: Cfg) -> Any:
    """One block a call: its header read, its views made again, the tower, the kept features.

    Inputs as the Qwen pipeline gives a graph whose grid is [1, 3] (QwenVisionState::Run:
    one picture's rows each call): pixel_values [a·b, 3·2·p·p] and image_grid_thw [1, 3].
    Output: image_features [a·b, text hidden].
    """
    import onnx_ir as ir

    p, s = anyres.PATCH, side(cfg)
    g_side = s // int(cfg.get("vision_config.patch_size", 14))
    hidden = int(cfg.text.get("hidden_size"))
    b = GraphBuilder("llava_next_vision")
    rows = b.input("pixel_values", ir.DataType.FLOAT, ["patches", 3 * 2 * p * p])
    grid = b.input("image_grid_thw", ir.DataType.INT64, [1, 3])

    def c(*values: int) -> Any:
        return b.const(np.array(values, np.int64))

    def field(name: str) -> Any:  # a header field, as a 1-element int64 tensor
        return b.op("Gather", head, c(anyres.FIELDS.index(name)))

    # The block's stream of RGB pixels in raster order: [a·p·b·p, 3], frame 0.
    hw = b.op("Slice", grid, c(1), c(3), c(1))  # [1, 2] -> a, b
    ab = b.op("Reshape", hw, c(2))
    x = b.op("Reshape", rows, b.op("Concat", ab, c(3, 2, p, p), axis=0))
    x = b.op("Gather", x, b.const(np.int64(0)), axis=3)  # [a, b, 3, p, p]
    x = b.op("Transpose", x, perm=[0, 3, 1, 4, 2])  # [a, p, b, p, 3]
    stream = b.op("Reshape", x, c(-1, 3))
    # The header: each channel's black and white, then 16-bit fields (red high, green low).
    black = b.op("Gather", stream, b.const(np.int64(0)), axis=0)  # [3]
    white = b.op("Gather", stream, b.const(np.int64(1)), axis=0)
    raw = b.op("Slice", stream, c(2), c(anyres.HEADER), c(0))
    level = b.op("Div", b.op("Sub", raw, black), b.op("Sub", white, black))
    level = b.op("Cast", b.op("Round", b.op("Mul", level, b.const(np.float32(255)))), to=7)
    high = b.op("Gather", level, b.const(np.int64(0)), axis=1)
    low = b.op("Gather", level, b.const(np.int64(1)), axis=1)
    head = b.op("Add", b.op("Mul", high, b.const(np.int64(256))), low)
    fit_h, fit_w = field("fit_h"), field("fit_w")
    grid_h, grid_w = field("grid_h"), field("grid_w")
    # The view: the base view, or the fitted picture laid on black tiles.
    count = b.op("Mul", fit_h, fit_w)
    start = c(anyres.HEADER)
    view = b.op("Slice", stream, start, b.op("Add", start, count), c(0))
    view = b.op("Reshape", view, b.op("Concat", fit_h, fit_w, c(3), axis=0))
    full_h, full_w = b.op("Mul", grid_h, c(s)), b.op("Mul", grid_w, c(s))
    top, left = field("paste_y"), field("paste_x")
    pads = b.op(
        "Concat",
        top,
        left,
        c(0),
        b.op("Sub", b.op("Sub", full_h, top), fit_h),
        b.op("Sub", b.op("Sub", full_w, left), fit_w),
        c(0),
        axis=0,
    )
    laid = b.op("Pad", view, pads)
    inside = b.op("Pad", b.op("ConstantOfShape", b.op("Shape", view), value=_bool(True)), pads)
    canvas = b.op("Where", inside, laid, black)  # black as the runtime normalized it
    tiles = b.op("Reshape", canvas, b.op("Concat", grid_h, c(s), grid_w, c(s, 3), axis=0))
    tiles = b.op("Transpose", tiles, perm=[0, 2, 4, 1, 3])  # [gh, gw, 3, s, s]
    tiles = b.op("Reshape", tiles, c(-1, 3, s, s))
    feats = graphs.tower_features(b, cfg, tiles)  # [gh·gw, g², hidden]
    # The tiles' features on one grid, the kept rows and columns, a newline a row.
    shape = b.op("Concat", grid_h, grid_w, c(g_side, g_side, hidden), axis=0)
    laid_out = b.op("Transpose", b.op("Reshape", feats, shape), perm=[0, 2, 1, 3, 4])
    plane = b.op(
        "Reshape",
        laid_out,
        b.op("Concat", b.op("Mul", grid_h, c(g_side)), b.op("Mul", grid_w, c(g_side)),
             c(hidden), axis=0),
    )  # fmt: skip
    first = b.op("Concat", field("keep_top"), field("keep_left"), axis=0)
    last = b.op(
        "Add",
        first,
        b.op("Concat", field("keep_rows"), field("keep_cols"), axis=0),
    )
    kept = b.op("Slice", plane, first, last, c(0, 1))
    newline = b.weight("image_newline", [hidden])
    column = b.op("Expand", newline, b.op("Concat", field("keep_rows"), c(1, hidden), axis=0))
    lined = b.op("Concat", kept, column, axis=1)
    width = b.op("Add", field("keep_cols"), field("newline"))
    lined = b.op("Slice", lined, c(0), width, c(1))
    b.output(b.op("Reshape", lined, c(-1, hidden)), "image_features")
    return b.model()


def _bool(value: bool) -> Any:
    import onnx_ir as ir

    return ir.tensor(np.array([value]))


def own_graphs(request: FixRequest) -> str | None:
    """Our vision and embedding graphs in place of mobius's; the decoder's weights renamed."""
    models, cfg = request.models, request.cfg
    models["vision_encoder"] = vision_graph(cfg)
    models["embedding"] = graphs.embedding_graph(cfg)
    renamed = name_decoder_weights(models["decoder"].graph, graphs.TEXT, graphs.HEAD)
    return (
        f"Graphs: the anyres blocks, the CLIP tower (hidden states {graphs.feature_layers(cfg)}) "
        f"and the embedding are mmforge's; mobius's decoder ({renamed} weights)"
    )


def adapt_tokenizer(tok: dict[str, Any], config: dict[str, Any], cfg: Cfg, folder: Path) -> str:
    """The marker pieces on the image id; the template writes two markers a picture."""
    image = int(cfg.first("image_token_index", "image_token_id"))
    read_as(tok, [(content, image) for content in ABSORBED])
    template = str(config.get("chat_template", "")).replace(tokenizer.IMAGE_TEXT, MARKERS)
    template = tokenizer.spelled_out_roles(template)
    template, bos = bos_written(template, tok, folder)
    config["chat_template"] = template
    config["add_bos_token"] = False  # the template writes it
    return (
        f"Tokenizer: the runtime's marker text reads as {tokenizer.IMAGE_TEXT} (id {image}); "
        f"the chat template writes two {tokenizer.MARKER} for each picture (its base view's "
        "block and its tiles' block)" + ("" if not bos else " and the BOS the tokenizer adds")
    )


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """LlavaNextProcessor's ids and pixels, the checkpoint's own processor."""
    import torch
    from transformers import LlavaNextProcessor

    cfg = request.checkpoint.cfg
    processor = LlavaNextProcessor(
        image_processor=image_processor(request.checkpoint),
        tokenizer=request.tokenizer,
        patch_size=int(cfg.get("vision_config.patch_size", 14)),
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's class token, dropped by `default`
    )
    out = processor(text=request.prompt, images=request.images or None, return_tensors="pt")
    ids = out["input_ids"][0].tolist()
    tensors: dict[str, Any] = {"input_ids": torch.tensor([ids])}
    tensors["attention_mask"] = torch.ones_like(tensors["input_ids"])
    if request.images:
        tensors["pixel_values"] = out["pixel_values"]
        tensors["image_sizes"] = out["image_sizes"]
    return ReferenceInputs(prompt=request.prompt, input_ids=ids, tensors=tensors)


def from_runtime(request: RuntimeArrays) -> None:
    """The runtime's blocks as LlavaNextProcessor's pixel_values and image_sizes."""
    import torch

    arrays = request.arrays
    if "pixel_values" not in arrays:
        return
    grid = arrays["image_grid_thw"].astype("int64")
    pixels = arrays["pixel_values"].astype("float32")
    longest = pixels.shape[0] // grid.shape[0]
    p = anyres.PATCH
    blocks = []
    for i, (_, a, b) in enumerate(grid.tolist()):
        rows = pixels[i * longest : i * longest + a * b].reshape(a, b, 3, 2, p, p)[:, :, :, 0]
        blocks.append(rows.transpose(2, 0, 3, 1, 4).reshape(3, a * p, b * p))
    views, sizes = anyres.views_from_runtime(blocks, side(request.cfg))
    most = max(v.shape[0] for v in views)
    batch = np.zeros((len(views), most, *views[0].shape[1:]), np.float32)
    for i, v in enumerate(views):
        batch[i, : v.shape[0]] = v
    request.inputs.tensors["pixel_values"] = torch.from_numpy(batch)
    request.inputs.tensors["image_sizes"] = torch.tensor(sizes)


def make(llava: Family) -> Family:
    """The LLaVA-NeXT entry: LLaVA-1.5's tower and decoder, anyres on the Qwen pipeline."""
    from mmforge.backend.families.llava import expect, tiny

    package = PackageSpec(
        model_fields=_tokens,
        vision_fields=lambda cfg, pre: {"spatial_merge_size": 1, "patch_size": anyres.PATCH},
        vision_inputs={"pixel_values": "pixel_values", "image_grid_thw": "image_grid_thw"},
        processor_json=_processor,
        dtypes=("f32", "int4", "int8"),
        graph_fixes=(own_graphs,),
        rename_checkpoint=graphs.checkpoint_name,
        unused_ok=graphs.unused_tensors,
        builder_type=lambda cfg: "llava",
        picture_sizing=_sizing,
        adapt_tokenizer=adapt_tokenizer,
        notes=(
            "LLaVA-NeXT runs on ONNX Runtime GenAI's qwen2_5_vl pipeline: each picture "
            "reaches it as two blocks (its base view, its tiles) whose ids the processor "
            "counts, read as <image> ids by the package's tokenizer; 1-D positions.",
            "Pictures are cut as LlavaNextImageProcessor cuts them before the runtime sees "
            "them (mmforge's intake); a picture file handed to the runtime by another "
            "program is refused.",
        ),
    )
    return dataclasses.replace(
        llava,
        key="llava_next",
        name="LLaVA-NeXT",
        pipeline_type="qwen2_5_vl",
        recognition=Recognition(model_types=("llava_next",)),
        profile=dataclasses.replace(
            llava.profile,
            image_tokens=_image_tokens,
            hf_class="LlavaNextForConditionalGeneration",
            fields=FIELDS,
            notes=(
                "Runs on the runtime's qwen2_5_vl pipeline (the runtime has no llava_next "
                "type): every picture's ids as LlavaNextProcessor counts them.",
            ),
        ),
        package=package,
        reference=Reference(prepare=prepare, from_runtime=from_runtime),
        fixtures=Fixtures(tiny=tiny.LLAVA_NEXT, expect=expect.LLAVA_NEXT),
    )
