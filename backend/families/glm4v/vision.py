"""GLM-4V's vision tower as an ONNX graph, op by op (mobius 0.1 has none).

Follows transformers 5.24's Glm4vVisionModel for one picture (the runtime's qwen2_5_vl
pipeline calls the vision graph once per picture with its patched `pixel_values`
[h·w, C·T·p·p] and `image_grid_thw` [1, 3]): the Conv3d patch embedding as one MatMul over
the flattened patch, post-conv RMSNorm, learned positions resampled bicubically to the grid
(GridSample, border padding, the patch centres), 2-D rotary attention blocks (RMSNorm,
SwiGLU to out_hidden_size), post RMSNorm, the Conv2d downsample over each merge block and the
patch merger (Linear, LayerNorm, GELU, gated MLP). Patches arrive block-major over the
merge blocks (Qwen's order, measured equal to Glm4vImageProcessor's), so a patch's row and
column are computed from its index and the grid.

GLM-4.1V's packages use it (build.py); tests/backend/test_glm4v_vision.py holds it to
transformers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.families._base import Cfg
from mmforge.backend.families.components.graph_builder import GraphBuilder


def _rms_norm(g: GraphBuilder, x: Any, name: str, size: int, eps: float) -> Any:
    mean = g.op("ReduceMean", g.op("Mul", x, x), g.const(np.array([-1])), keepdims=1)
    inv = g.op("Reciprocal", g.op("Sqrt", g.op("Add", mean, g.const(np.float32(eps)))))
    return g.op("Mul", g.weight(name + ".weight", [size]), g.op("Mul", x, inv))


def _rotate_half(g: GraphBuilder, x: Any, half: int) -> Any:
    x1 = g.slice(x, 0, half, -1)
    x2 = g.slice(x, half, 2 * half, -1)
    return g.op("Concat", g.op("Neg", x2), x1, axis=-1)


def _positions(g: GraphBuilder, grid: Any, n: Any, merge: int) -> tuple[Any, Any, Any, Any]:
    """Each patch's row and column (float [N]) and the grid's height and width (float [1])."""

    def i64(v: Any) -> Any:
        return g.const(np.array(v, dtype=np.int64))

    h = g.op("Gather", g.op("Reshape", grid, i64([-1])), i64([1]), axis=0)
    w = g.op("Gather", g.op("Reshape", grid, i64([-1])), i64([2]), axis=0)
    idx = g.op("Range", i64(0), n, i64(1))
    per_block = merge * merge
    block = g.op("Div", idx, i64(per_block))
    inner = g.op("Mod", idx, i64(per_block))
    blocks_w = g.op("Div", w, i64([merge]))
    row = g.op(
        "Add",
        g.op("Mul", g.op("Div", block, blocks_w), i64(merge)),
        g.op("Div", inner, i64(merge)),
    )
    col = g.op(
        "Add",
        g.op("Mul", g.op("Mod", block, blocks_w), i64(merge)),
        g.op("Mod", inner, i64(merge)),
    )

    def f(v: Any) -> Any:
        return g.op("Cast", v, to=1)

    return f(row), f(col), f(h), f(w)


def vision_graph(cfg: Cfg, prefix: str = "model.visual.") -> Any:
    """The tower for one picture, weights under the checkpoint's names.

    pixel_values [N, C·T·p·p] and image_grid_thw [1, 3] → image_features [N / merge², out].
    """

    def v(k: Any, d: Any = None) -> Any:
        return cfg.get("vision_config." + k, d)

    dim, heads, depth = int(v("hidden_size")), int(v("num_heads")), int(v("depth"))
    out, inter = int(v("out_hidden_size")), int(v("intermediate_size"))
    patch, temporal = int(v("patch_size", 14)), int(v("temporal_patch_size", 2))
    channels, merge = int(v("in_channels", 3)), int(v("spatial_merge_size", 2))
    eps, bias = float(v("rms_norm_eps", 1e-5)), bool(v("attention_bias", False))
    side = int(v("image_size")) // patch
    theta = float((v("rope_parameters") or {}).get("rope_theta", 10000.0))
    head = dim // heads
    if v("hidden_act", "silu") != "silu":
        raise ValueError(f"vision_config.hidden_act {v('hidden_act')!r}: the graph has SiLU only")
    flat = channels * temporal * patch * patch

    g = GraphBuilder("glm4v_vision")
    ir = g.ir
    pixels = g.input("pixel_values", ir.DataType.FLOAT, ["num_patches", flat])
    grid = g.input("image_grid_thw", ir.DataType.INT64, [1, 3])

    def i64(a: Any) -> Any:
        return g.const(np.array(a, dtype=np.int64))

    conv = g.weight(prefix + "patch_embed.proj.weight", [dim, channels, temporal, patch, patch])
    x = g.op(
        "MatMul", pixels, g.op("Transpose", g.op("Reshape", conv, i64([dim, flat])), perm=[1, 0])
    )
    x = g.op("Add", x, g.weight(prefix + "patch_embed.proj.bias", [dim]))
    x = _rms_norm(g, x, prefix + "post_conv_layernorm", dim, eps)

    n = g.op("Gather", g.op("Shape", pixels), i64(0), axis=0)
    row, col, h, w = _positions(g, grid, n, merge)

    # Learned positions on a side×side grid, sampled at each patch centre (bicubic, border).
    table = g.weight(prefix + "embeddings.position_embedding.weight", [side * side, dim])
    image = g.op("Transpose", g.op("Reshape", table, i64([1, side, side, dim])), perm=[0, 3, 1, 2])
    half, two, one = g.const(np.float32(0.5)), g.const(np.float32(2.0)), g.const(np.float32(1.0))
    nx = g.op("Sub", g.op("Mul", g.op("Div", g.op("Add", col, half), w), two), one)
    ny = g.op("Sub", g.op("Mul", g.op("Div", g.op("Add", row, half), h), two), one)
    points = g.op(
        "Concat", g.op("Unsqueeze", nx, i64([1])), g.op("Unsqueeze", ny, i64([1])), axis=1
    )
    points = g.op("Reshape", points, i64([1, -1, 1, 2]))
    sampled = g.op(
        "GridSample", image, points, mode="bicubic", padding_mode="border", align_corners=0
    )
    x = g.op("Add", x, g.op("Transpose", g.op("Reshape", sampled, i64([dim, -1])), perm=[1, 0]))

    # 2-D rope: head/4 frequencies for rows, the same for columns, the pair repeated.
    quarter = head // 4
    inv = 1.0 / theta ** (np.arange(0, head // 2, 2, dtype=np.float32) / (head // 2))
    inv_c = g.const(inv.astype(np.float32).reshape(1, quarter))
    fr = g.op("Mul", g.op("Unsqueeze", row, i64([1])), inv_c)
    fc = g.op("Mul", g.op("Unsqueeze", col, i64([1])), inv_c)
    freqs = g.op("Concat", fr, fc, fr, fc, axis=1)  # [N, head]
    cos = g.op("Unsqueeze", g.op("Cos", freqs), i64([1]))  # [N, 1, head]
    sin = g.op("Unsqueeze", g.op("Sin", freqs), i64([1]))
    scale = g.const(np.float32(head**-0.5))

    for i in range(depth):
        p = f"{prefix}blocks.{i}."
        y = _rms_norm(g, x, p + "norm1", dim, eps)
        qkv = g.op(
            "Reshape", g.linear(y, p + "attn.qkv", dim, 3 * dim, bias), i64([-1, 3, heads, head])
        )
        q, k, val = (g.op("Squeeze", g.slice(qkv, j, j + 1, 1), i64([1])) for j in range(3))
        q = g.op("Add", g.op("Mul", q, cos), g.op("Mul", _rotate_half(g, q, head // 2), sin))
        k = g.op("Add", g.op("Mul", k, cos), g.op("Mul", _rotate_half(g, k, head // 2), sin))
        q, k, val = (g.op("Transpose", t, perm=[1, 0, 2]) for t in (q, k, val))  # [H, N, d]
        scores = g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 2, 1])), scale)
        att = g.op("MatMul", g.op("Softmax", scores, axis=-1), val)
        att = g.op("Reshape", g.op("Transpose", att, perm=[1, 0, 2]), i64([-1, dim]))
        x = g.op("Add", x, g.linear(att, p + "attn.proj", dim, dim, False))
        y = _rms_norm(g, x, p + "norm2", dim, eps)
        gate = g.linear(y, p + "mlp.gate_proj", dim, out, False)
        up = g.linear(y, p + "mlp.up_proj", dim, out, False)
        silu = g.op("Mul", gate, g.op("Sigmoid", gate))
        x = g.op("Add", x, g.linear(g.op("Mul", silu, up), p + "mlp.down_proj", out, dim, False))

    x = _rms_norm(g, x, prefix + "post_layernorm", dim, eps)
    x = g.op("Transpose", g.op("Reshape", x, i64([-1, merge, merge, dim])), perm=[0, 3, 1, 2])
    x = g.op(
        "Conv",
        x,
        g.weight(prefix + "downsample.weight", [out, dim, merge, merge]),
        g.weight(prefix + "downsample.bias", [out]),
        kernel_shape=[merge, merge],
        strides=[merge, merge],
    )
    x = g.op("Reshape", x, i64([-1, out]))
    m = prefix + "merger."
    x = g.linear(x, m + "proj", out, out, False)
    x = g.gelu(g.layer_norm(x, m + "post_projection_norm", out, 1e-5), tanh=False)
    gate = g.linear(x, m + "gate_proj", out, inter, False)
    act = g.op("Mul", gate, g.op("Sigmoid", gate))
    x = g.linear(
        g.op("Mul", act, g.linear(x, m + "up_proj", out, inter, False)),
        m + "down_proj",
        inter,
        out,
        False,
    )
    g.output(x, "image_features")
    return g.model()
