"""The NaViT-style SigLIP tower on a picture's own size (Idefics2's and Idefics3's towers).

transformers 5.25's Idefics2VisionTransformer (Idefics3VisionTransformer is the same):

- Idefics2VisionEmbeddings: the patch conv (valid: a remainder under one patch is
  dropped), and position ids bucketed from each patch's fractional coordinates onto the
  tower's `image_size / patch_size` grid (`torch.bucketize(..., right=True)` is the count
  of boundaries at or below the coordinate);
- the SigLIP encoder and `post_layernorm` (`towers/siglip.py`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg, as_int
from mmforge.backend.families.components.graph_builder import GELU_TANH, GraphBuilder
from mmforge.backend.families.components.towers.siglip import siglip_encoder


def position_boundaries(side: int) -> np.ndarray:
    """The bucket boundaries Idefics2VisionEmbeddings uses: `arange(1 / side, 1.0, 1 / side)`.

    Made by torch itself (float32), since its arange rounds differently from a float64
    arange cast to float32 for most sides.
    """
    import torch

    step = 1 / side
    return np.asarray(torch.arange(step, 1.0, step, dtype=torch.float32).numpy(), np.float32)


def activation(g: GraphBuilder, x: Any, name: str, where: str) -> Any:
    """The activation transformers names `name`: silu, GELU (tanh, `GELU_TANH`) or exact GELU.

    Raises:
        MmforgeError: Another activation (`where`: the part that names it, for the message).
    """
    if name == "silu":
        return g.op("Mul", x, g.op("Sigmoid", x))
    if name in GELU_TANH:
        return g.gelu(x, tanh=True)
    if name == "gelu":
        return g.gelu(x, tanh=False)
    raise MmforgeError(
        f"{where} activation {name!r} is not supported",
        "Idefics2 releases use gelu_pytorch_tanh in the tower and silu in the connector",
    )


def _bucket(g: GraphBuilder, count: Any, boundaries: Any) -> Any:
    """Each patch index's position bucket along one side of `count` patches, [count]."""
    import onnx_ir as ir

    f32 = ir.DataType.FLOAT
    # Reciprocal, not Div(1, n): ONNX Runtime's DivMulFusion rewrites 1 / n · i as i / n,
    # which rounds otherwise than transformers' float32 i · (1 / n) and moves a patch to
    # the next bucket (measured: 7 of 49 rows on a 70-wide grid).
    step = g.op("Reciprocal", g.op("Cast", count, to=f32))
    index = g.op(
        "Cast",
        g.op("Range", g.const(np.int64(0)), g.op("Squeeze", count), g.const(np.int64(1))),
        to=f32,
    )
    coord = g.op("Min", g.op("Mul", index, step), g.const(np.float32(1.0 - 1e-6)))
    at_or_below = g.op(
        "LessOrEqual",
        g.op("Unsqueeze", boundaries, g.const(np.array([0]))),
        g.op("Unsqueeze", coord, g.const(np.array([1]))),
    )  # [count, side - 1]
    return g.op(
        "ReduceSum",
        g.op("Cast", at_or_below, to=ir.DataType.INT64),
        g.const(np.array([1])),
        keepdims=0,
    )


def navit_tower(g: GraphBuilder, cfg: Cfg, prefix: str, pixels: Any = None) -> Any:
    """The NaViT SigLIP tower on the graph's pixels: pixel_values -> [N, patches, width].

    Input `pixel_values` [1, N, 3, H, W] as the runtime's videochat_flash_qwen processor
    hands them (pictures of one size), at the size transformers resized them to; the
    patch conv, the bucketed positions, the SigLIP encoder and `post_layernorm`
    (Idefics2's and Idefics3's towers: Idefics3VisionTransformer is Idefics2's).
    `prefix`: the tower's weights' checkpoint names. `pixels`: pictures [N, 3, H, W] the
    graph already has, in place of the input.
    """
    import onnx_ir as ir

    v = cfg.sub("vision_config")
    width = int(v.get("hidden_size", 768))
    heads = int(v.get("num_attention_heads", 12))
    ff = int(v.get("intermediate_size", 3072))
    layers = int(v.get("num_hidden_layers", 12))
    eps = float(v.get("layer_norm_eps", 1e-6))
    patch = as_int(v.get("patch_size", 32))
    side = as_int(v.get("image_size", 224)) // patch
    channels = int(v.get("num_channels", 3))
    act = str(v.get("hidden_act", "gelu_pytorch_tanh"))

    if pixels is None:
        f32 = ir.DataType.FLOAT
        given = g.input("pixel_values", f32, ["batch", "num_images", channels, "height", "width"])
        shape = g.op(
            "Concat", g.const(np.array([-1])), g.op("Shape", given, start=2, end=5), axis=0
        )
        pixels = g.op("Reshape", given, shape)
    x = pixels
    emb = prefix + "embeddings."
    x = g.op(
        "Conv",
        x,
        g.weight(emb + "patch_embedding.weight", [width, channels, patch, patch]),
        g.weight(emb + "patch_embedding.bias", [width]),
        strides=[patch, patch],
        kernel_shape=[patch, patch],
    )  # [N, D, h, w]
    rows = g.op("Shape", x, start=2, end=3)
    cols = g.op("Shape", x, start=3, end=4)
    x = g.op("Transpose", g.op("Reshape", x, g.const(np.array([0, width, -1]))), perm=[0, 2, 1])
    boundaries = g.const(position_boundaries(side))
    by_row = g.op("Mul", _bucket(g, rows, boundaries), g.const(np.int64(side)))
    positions = g.op(
        "Add",
        g.op("Unsqueeze", by_row, g.const(np.array([1]))),
        g.op("Unsqueeze", _bucket(g, cols, boundaries), g.const(np.array([0]))),
    )  # [h, w]
    positions = g.op("Reshape", positions, g.const(np.array([-1])))
    table = g.weight(emb + "position_embedding.weight", [side * side, width])
    x = g.op("Add", x, g.op("Gather", table, positions, axis=0))
    return siglip_encoder(
        g, x, prefix, layers, width, heads, ff, eps, lambda h: activation(g, h, act, "Vision")
    )
