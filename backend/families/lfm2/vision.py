"""LFM2-VL: our SigLIP2 NaFlex vision tower and embedding graphs.

mobius 0.1 has no LFM2. The vision tower and the embedding are written here, op by op,
with the checkpoint's own tensor names as initializers, so weights and their report go
through the common path (convert/weights.py). The decoder is ONNX Runtime GenAI's
(decoder.py).

The vision graph follows transformers 5's Lfm2VlModel.get_image_features exactly:
- patch embedding (Linear on already patchified pixels) plus the learned position grid
  resized per image to its patch rows × columns with an antialiased bilinear filter
  (written as two small weight matrices, as transformers computes it);
- the SigLIP2 encoder with padded patches masked out of attention, then post-layernorm;
- each image's `factor`×`factor` patch blocks gathered into tokens (pixel unshuffle),
  padding dropped, then the projector (LayerNorm → Linear → GELU → Linear).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg
from mmforge.backend.families.components.graph_builder import GraphBuilder

VISION_PREFIX = "model.vision_tower."
PROJECTOR_PREFIX = "model.multi_modal_projector."
TEXT_PREFIX = "model.language_model."


def vision_graph(cfg: Cfg) -> Any:
    """The SigLIP2 NaFlex tower and the LFM2-VL projector, batched over padded images.

    Inputs: pixel_values [N, P, 3·ps²] (float32), pixel_attention_mask [N, P] and
    spatial_shapes [N, 2] (patch rows, columns; int64). Output: image_features
    [Σ tokens, text hidden], the images' tokens one after another.
    """
    import onnx_ir as ir

    v = cfg.sub("vision_config")
    hidden = int(v.get("hidden_size"))
    heads = int(v.get("num_attention_heads"))
    ff = int(v.get("intermediate_size"))
    layers = int(v.get("num_hidden_layers"))
    eps = float(v.get("layer_norm_eps", 1e-6))
    patch = int(v.get("patch_size", 16))
    channels = int(v.get("num_channels", 3))
    grid = math.isqrt(int(v.get("num_patches", 256)))
    if grid * grid != int(v.get("num_patches", 256)):
        raise MmforgeError(
            f"vision_config.num_patches={v.get('num_patches')} is not a square grid",
            "Only SigLIP2 towers with a square position grid (as released LFM2-VL) convert",
        )
    act = str(v.get("hidden_act", "gelu_pytorch_tanh"))
    if act not in ("gelu_pytorch_tanh", "gelu"):
        raise MmforgeError(
            f"Vision activation {act} is not supported",
            "Only gelu_pytorch_tanh or gelu towers (as released LFM2-VL) convert",
        )
    factor = int(cfg.get("downsample_factor", 2))
    text_hidden = int(cfg.text.get("hidden_size"))
    proj_hidden = int(cfg.get("projector_hidden_size", text_hidden))
    proj_bias = bool(cfg.get("projector_bias", True))
    proj_act = str(cfg.get("projector_hidden_act", "gelu"))
    if proj_act not in ("gelu", "gelu_pytorch_tanh"):
        raise MmforgeError(
            f"Projector activation {proj_act} is not supported",
            "Only gelu or gelu_pytorch_tanh projectors (as released LFM2-VL) convert",
        )

    g = GraphBuilder("lfm2_vl_vision")
    f32, i64 = ir.DataType.FLOAT, ir.DataType.INT64
    pixels = g.input("pixel_values", f32, ["num_images", "max_patches", channels * patch * patch])
    mask = g.input("pixel_attention_mask", i64, ["num_images", "max_patches"])
    shapes = g.input("spatial_shapes", i64, ["num_images", 2])
    emb = VISION_PREFIX + "embeddings."
    x = g.linear(pixels, emb + "patch_embedding", channels * patch * patch, hidden)
    x = g.op("Add", x, _resized_positions(g, shapes, pixels, emb, grid, hidden))

    # Padded patches are masked out as keys; their own rows are computed and dropped.
    keep = g.op("Cast", mask, to=f32)
    bias = g.op("Mul", g.op("Sub", g.const(np.float32(1)), keep), g.const(np.float32(-1e30)))
    bias = g.op("Unsqueeze", bias, g.const(np.array([1, 2])))  # [N, 1, 1, P]
    head_dim = hidden // heads
    split = g.const(np.array([0, 0, heads, head_dim]))
    for i in range(layers):
        p = f"{VISION_PREFIX}encoder.layers.{i}."
        h = g.layer_norm(x, p + "layer_norm1", hidden, eps)

        def heads_first(t: Any) -> Any:
            return g.op("Transpose", g.op("Reshape", t, split), perm=[0, 2, 1, 3])

        q = heads_first(g.linear(h, p + "self_attn.q_proj", hidden, hidden))
        k = heads_first(g.linear(h, p + "self_attn.k_proj", hidden, hidden))
        val = heads_first(g.linear(h, p + "self_attn.v_proj", hidden, hidden))
        scores = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
        scores = g.op("Add", g.op("Mul", scores, g.const(np.float32(head_dim**-0.5))), bias)
        ctx = g.op("MatMul", g.op("Softmax", scores, axis=-1), val)
        ctx = g.op(
            "Reshape", g.op("Transpose", ctx, perm=[0, 2, 1, 3]), g.const(np.array([0, 0, hidden]))
        )
        x = g.op("Add", x, g.linear(ctx, p + "self_attn.out_proj", hidden, hidden))
        h = g.layer_norm(x, p + "layer_norm2", hidden, eps)
        h = g.gelu(g.linear(h, p + "mlp.fc1", hidden, ff), tanh=act == "gelu_pytorch_tanh")
        x = g.op("Add", x, g.linear(h, p + "mlp.fc2", ff, hidden))
    x = g.layer_norm(x, VISION_PREFIX + "post_layernorm", hidden, eps)

    blocks = _token_blocks(g, x, shapes, factor, hidden)
    wide = hidden * factor * factor
    if cfg.get("projector_use_layernorm", True):
        blocks = g.layer_norm(blocks, PROJECTOR_PREFIX + "layer_norm", wide, 1e-5)
    y = g.linear(blocks, PROJECTOR_PREFIX + "linear_1", wide, proj_hidden, proj_bias)
    y = g.gelu(y, tanh=proj_act == "gelu_pytorch_tanh")
    y = g.linear(y, PROJECTOR_PREFIX + "linear_2", proj_hidden, text_hidden, proj_bias)
    g.output(y, "image_features")
    return g.model()


def _resized_positions(
    g: GraphBuilder, shapes: Any, pixels: Any, prefix: str, grid: int, hidden: int
) -> Any:
    """The position grid resized to each image's patch grid, padded to P rows: [N, P, D].

    An antialiased bilinear resize is, per axis, a triangle filter whose support widens
    by the downscale factor; each output position's weights over the `grid` source rows
    (or columns) are normalised to sum to one. Padding rows take position (0, 0).
    """
    sizes = g.op("Cast", shapes, to=1)  # float
    heights = g.slice(sizes, 0, 1, axis=1)  # [N, 1]
    widths = g.slice(sizes, 1, 2, axis=1)
    length = g.op("Shape", pixels, start=1, end=2)
    positions = g.op(
        "Cast",
        g.op("Range", g.const(np.int64(0)), g.op("Squeeze", length), g.const(np.int64(1))),
        to=1,
    )
    positions = g.op("Unsqueeze", positions, g.const(np.array([0])))  # [1, P]
    rows = g.op("Floor", g.op("Div", positions, widths))
    cols = g.op("Sub", positions, g.op("Mul", rows, widths))
    valid = g.op("Cast", g.op("Less", positions, g.op("Mul", heights, widths)), to=1)
    source = g.const(np.arange(grid, dtype=np.float32))

    def axis_weights(index: Any, size: Any) -> Any:  # [N, P, grid]
        scale = g.op("Div", g.const(np.float32(grid)), size)  # [N, 1]
        support = g.op("Max", scale, g.const(np.float32(1)))
        center = g.op(
            "Sub",
            g.op("Mul", g.op("Add", index, g.const(np.float32(0.5))), scale),
            g.const(np.float32(0.5)),
        )
        distance = g.op(
            "Abs", g.op("Sub", source, g.op("Unsqueeze", center, g.const(np.array([2]))))
        )
        ratio = g.op("Div", distance, g.op("Unsqueeze", support, g.const(np.array([2]))))
        w = g.op("Relu", g.op("Sub", g.const(np.float32(1)), ratio))
        return g.op("Div", w, g.op("ReduceSum", w, g.const(np.array([-1])), keepdims=1))

    w_rows = axis_weights(g.op("Mul", rows, valid), heights)
    w_cols = axis_weights(g.op("Mul", cols, valid), widths)
    outer = g.op(
        "Mul",
        g.op("Unsqueeze", w_rows, g.const(np.array([3]))),
        g.op("Unsqueeze", w_cols, g.const(np.array([2]))),
    )  # [N, P, grid, grid]
    outer = g.op("Reshape", outer, g.const(np.array([0, 0, grid * grid])))
    table = g.weight(prefix + "position_embedding.weight", [grid * grid, hidden])
    return g.op("MatMul", outer, table)


def _token_blocks(g: GraphBuilder, x: Any, shapes: Any, factor: int, hidden: int) -> Any:
    """Each image's factor×factor patch blocks as token rows, padding dropped: [T, f²·D].

    Token t of an image with w patch columns covers patch rows (t // (w/f))·f + r and
    columns (t % (w/f))·f + c; its row holds those patches for r, then c, then channels,
    the order of transformers' pixel_unshuffle.
    """
    heights = g.slice(shapes, 0, 1, axis=1)  # [N, 1] int64
    widths = g.slice(shapes, 1, 2, axis=1)
    f = g.const(np.int64(factor))
    per_row = g.op("Div", widths, f)
    tokens = g.op("Mul", g.op("Div", heights, f), per_row)  # [N, 1]
    patches = g.op("Shape", x, start=1, end=2)  # [1]
    slots = g.op("Div", g.op("Squeeze", patches), g.const(np.int64(factor * factor)))
    t = g.op(
        "Unsqueeze",
        g.op("Range", g.const(np.int64(0)), slots, g.const(np.int64(1))),
        g.const(np.array([0])),
    )
    block_row = g.op("Mul", g.op("Div", t, per_row), f)  # [N, T]
    block_col = g.op("Mul", g.op("Mod", t, per_row), f)
    r_off = np.repeat(np.arange(factor), factor).astype(np.int64)  # r-major, then c
    c_off = np.tile(np.arange(factor), factor).astype(np.int64)
    three = g.const(np.array([2]))
    rows = g.op("Add", g.op("Unsqueeze", block_row, three), g.const(r_off))  # [N, T, f²]
    cols = g.op("Add", g.op("Unsqueeze", block_col, three), g.const(c_off))
    index = g.op("Add", g.op("Mul", rows, g.op("Unsqueeze", widths, three)), cols)
    is_token = g.op("Less", t, tokens)  # [N, T]
    index = g.op("Where", g.op("Unsqueeze", is_token, three), index, g.const(np.int64(0)))
    count = g.op("Shape", x, start=0, end=1)
    image = g.op("Range", g.const(np.int64(0)), g.op("Squeeze", count), g.const(np.int64(1)))
    offset = g.op("Mul", image, g.op("Squeeze", patches))
    index = g.op("Add", index, g.op("Unsqueeze", offset, g.const(np.array([1, 2]))))
    flat = g.op("Reshape", x, g.const(np.array([-1, hidden])))
    gathered = g.op("Gather", flat, index, axis=0)  # [N, T, f², D]
    gathered = g.op("Reshape", gathered, g.const(np.array([-1, factor * factor * hidden])))
    return g.op("Compress", gathered, g.op("Reshape", is_token, g.const(np.array([-1]))), axis=0)


def embedding_graph(cfg: Cfg) -> Any:
    """Token embeddings with the image features written at the image token positions.

    Placeholders keep their text embedding when no features come with them (every
    decode step), as in transformers, which replaces them only when pixels are given.
    """
    import onnx_ir as ir

    text = cfg.text
    vocab, hidden = int(text.get("vocab_size")), int(text.get("hidden_size"))
    image_token = cfg.get("image_token_id")
    if not isinstance(image_token, int):
        raise MmforgeError(
            "config.json has no image_token_id",
            "Add image_token_id (the id of <image> in the tokenizer) to config.json",
        )
    g = GraphBuilder("lfm2_vl_embedding")
    ids = g.input("input_ids", ir.DataType.INT64, ["batch_size", "sequence_length"])
    features = g.input("image_features", ir.DataType.FLOAT, ["num_image_tokens", hidden])
    table = g.weight(TEXT_PREFIX + "embed_tokens.weight", [vocab, hidden])
    embeds = g.op("Gather", table, ids, axis=0)
    has_features = g.op("Greater", g.op("Size", features), g.const(np.int64(0)))
    slots = g.op("And", g.op("Equal", ids, g.const(np.int64(image_token))), has_features)
    where = g.op("Transpose", g.op("NonZero", slots), perm=[1, 0])  # [M, 2]
    g.output(g.op("ScatterND", embeds, where, features), "inputs_embeds")
    return g.model()
