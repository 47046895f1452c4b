"""Gemma 3n's vision tower as an ONNX graph, op by op (mobius 0.1 has none).

Follows timm 1.0's `mobilenetv5_300m_enc` (MobileNetV5Encoder, the tower transformers wraps
in TimmWrapperModel) and transformers 5.25's Gemma3nModel.get_image_features:

- the stem (3×3 stride-2 conv with bias, RMSNorm2d, GELU-tanh), then four stages of edge
  residual (`er`), universal inverted residual (`uir`) and mobile multi-query attention
  (`mqa`) blocks, each conv with TF "same" padding (ONNX `SAME_UPPER`: the extra row and
  column at the end, as timm's Conv2dSame), every norm an RMSNorm over channels;
- the multi-scale fusion adapter: the last two stages' outputs, the lower one upsampled
  (nearest) to the higher one's size, concatenated, an inverted-residual FFN to 2048
  channels, average-pooled (or bilinearly resized when the size does not divide) to 16×16,
  RMSNorm;
- the soft tokens, [N, 256, 2048] times √2048, through Gemma3nMultimodalEmbedder: RMSNorm,
  Linear to the text width, RMSNorm without scale.

The picture size is fixed by the package's processor (a square resize), so every feature
map's size is known when the graph is built; the graph takes `pixel_values`
[N, 3, size, size] and gives `image_features` [N, 256, text hidden]. The block list is
timm's architecture definition, read as data: the only argument timm's builder takes from
`vision_config.model_args` that changes it is `channel_multiplier`, and any other is
refused, as is any other architecture. tests/backend/test_gemma3n_vision.py holds the graph
to timm's tower and transformers' embedder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg
from mmforge.backend.families.components.graph_builder import GraphBuilder
from mmforge.backend.families.gemma3n.graphs import rms_norm

ARCHITECTURE = "mobilenetv5_300m_enc"
TOWER = "model.vision_tower.timm_model."
EMBEDDER = "model.embed_vision."
FEATURES = 2048  # MobileNetV5Encoder.num_features: the adapter's width, fixed in timm
GRID = 16  # the adapter's output resolution: 256 soft tokens
_STEM = 64
_EPS = 1e-6  # timm's RmsNorm2d default, which MobileNetV5 uses throughout


def _stages() -> tuple[tuple[str, ...], ...]:
    """The block strings of timm's mobilenetv5_300m_enc (`_gen_mobilenet_v5`), four stages."""
    return (
        ("er_k3_s2_e4_c128", "er_k3_s1_e4_c128", "er_k3_s1_e4_c128"),
        (
            "uir_a3_k5_s2_e6_c256", "uir_a5_k0_s1_e4_c256", "uir_a3_k0_s1_e4_c256",
            "uir_a5_k0_s1_e4_c256", "uir_a3_k0_s1_e4_c256",
        ),
        ("uir_a5_k5_s2_e6_c640",)
        + ("uir_a5_k0_s1_e4_c640",) * 7
        + ("uir_a0_k0_s1_e1_c640",)
        + ("mqa_k3_h12_v2_s1_d64_c640", "uir_a0_k0_s1_e2_c640") * 14,
        ("uir_a5_k5_s2_e6_c1280",) + ("mqa_k3_h16_s1_d96_c1280", "uir_a0_k0_s1_e2_c1280") * 19,
    )  # fmt: skip


@dataclass(frozen=True)
class Block:
    """One block of the tower, channels already rounded."""

    kind: str  # "er", "uir" or "mqa"
    cin: int
    cout: int
    stride: int
    kernel: int  # er: the expansion conv; uir: the middle depthwise conv; mqa: the kv down conv
    start: int = 0  # uir: the starting depthwise conv (0: none)
    expand: float = 1.0
    heads: int = 0
    dim: int = 0  # mqa: the key and value width
    kv_stride: int = 1


def make_divisible(value: float, divisor: int = 8) -> int:
    """As timm's make_divisible: the nearest multiple of 8, never below 90 % of the value."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _options(text: str) -> tuple[str, dict[str, str]]:
    kind, *ops = text.split("_")
    return kind, {op[0]: op[1:] for op in ops}


def blocks(multiplier: float = 1.0) -> list[list[Block]]:
    """The tower's blocks, stage by stage, as timm's EfficientNetBuilder makes them."""
    cin = _STEM if multiplier < 1.0 else make_divisible(_STEM * multiplier)
    stages: list[list[Block]] = []
    for stage in _stages():
        built: list[Block] = []
        for text in stage:
            kind, o = _options(text)
            cout = make_divisible(int(o["c"]) * multiplier)
            kernel, stride = int(o["k"]), int(o["s"])
            if kind == "er":
                block = Block(kind, cin, cout, stride, kernel, expand=float(o["e"]))
            elif kind == "uir":
                block = Block(kind, cin, cout, stride, kernel, int(o["a"]), float(o["e"]))
            else:
                heads, dim, kv = int(o["h"]), int(o["d"]), int(o.get("v", "1"))
                block = Block(kind, cin, cout, stride, kernel, heads=heads, dim=dim, kv_stride=kv)
            built.append(block)
            cin = cout
        stages.append(built)
    return stages


def channel_multiplier(cfg: Cfg) -> float:
    """The tower's channel multiplier; MmforgeError for a tower this graph does not build."""
    hint = (
        "mmforge converts Gemma 3n's tower as released (timm's mobilenetv5_300m_enc); use "
        "the release's config.json"
    )
    architecture = cfg.get("vision_config.architecture", ARCHITECTURE)
    if architecture != ARCHITECTURE:
        raise MmforgeError(
            f"vision_config.architecture is {architecture!r}; mmforge builds Gemma 3n's "
            f"tower for {ARCHITECTURE!r} only",
            hint,
        )
    args = cfg.get("vision_config.model_args") or {}
    if not isinstance(args, dict):
        raise MmforgeError("vision_config.model_args is not a mapping", hint)
    unknown = sorted(set(args) - {"channel_multiplier"})
    if unknown:
        raise MmforgeError(
            f"vision_config.model_args sets {', '.join(map(repr, unknown))}, which changes "
            "timm's MobileNetV5 in ways mmforge does not build",
            hint,
        )
    value = args.get("channel_multiplier", 1.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 4:
        raise MmforgeError(
            f"vision_config.model_args.channel_multiplier {value!r} is not usable", hint
        )
    return float(value)


def _same(size: int, stride: int) -> int:
    return -(-size // stride)


class _Tower:
    def __init__(self, g: GraphBuilder):
        self.g = g

    def i64(self, values: list[int]) -> Any:
        return self.g.const(np.array(values, dtype=np.int64))

    def conv(
        self, x: Any, name: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1
    ) -> Any:
        g = self.g
        w = g.weight(name + ".weight", [cout, cin // groups, k, k])
        return g.op(
            "Conv", x, w, auto_pad="SAME_UPPER", group=groups, kernel_shape=[k, k],
            strides=[stride, stride],
        )  # fmt: skip

    def norm(self, x: Any, name: str, c: int, act: bool = False) -> Any:
        """RmsNorm2d, as timm's (over channels, with weight), then GELU-tanh when `act`."""
        g = self.g
        mean = g.op("ReduceMean", g.op("Mul", x, x), self.i64([1]), keepdims=1)
        inv = g.op("Reciprocal", g.op("Sqrt", g.op("Add", mean, g.const(np.float32(_EPS)))))
        w = g.op("Reshape", g.weight(name + ".weight", [c]), self.i64([1, c, 1, 1]))
        y = g.op("Mul", g.op("Mul", x, inv), w)
        return g.gelu(y, tanh=True) if act else y

    def conv_norm(
        self, x: Any, name: str, cin: int, cout: int, k: int, stride: int = 1,
        groups: int = 1, act: bool = True,
    ) -> Any:  # fmt: skip
        """ConvNormAct, as timm's: `.conv`, then `.bn` (the norm, named as BatchNorm was)."""
        y = self.conv(x, name + ".conv", cin, cout, k, stride, groups)
        return self.norm(y, name + ".bn", cout, act)

    def resize(self, x: Any, size: int, **attrs: Any) -> Any:
        """The picture map resized to size × size, its batch and channels kept."""
        g = self.g
        sizes = g.op("Concat", g.slice(g.op("Shape", x), 0, 2, 0), self.i64([size, size]), axis=0)
        return g.op("Resize", x, None, None, sizes, **attrs)

    def scale(self, x: Any, name: str, c: int) -> Any:
        w = self.g.op("Reshape", self.g.weight(name + ".gamma", [c]), self.i64([1, c, 1, 1]))
        return self.g.op("Mul", x, w)

    def edge(self, x: Any, name: str, b: Block) -> Any:
        mid = make_divisible(b.cin * b.expand)
        y = self.conv(x, name + ".conv_exp", b.cin, mid, b.kernel, b.stride)
        y = self.norm(y, name + ".bn1", mid, act=True)
        y = self.conv(y, name + ".conv_pwl", mid, b.cout, 1)
        y = self.norm(y, name + ".bn2", b.cout)
        return self.g.op("Add", y, x) if b.stride == 1 and b.cin == b.cout else y

    def inverted(
        self, x: Any, name: str, b: Block, skip: bool = True, layer_scale: bool = True
    ) -> Any:
        y = x
        if b.start:
            stride = 1 if b.kernel else b.stride
            y = self.conv_norm(y, name + ".dw_start", b.cin, b.cin, b.start, stride, b.cin, False)
        mid = make_divisible(b.cin * b.expand)
        y = self.conv_norm(y, name + ".pw_exp", b.cin, mid, 1)
        if b.kernel:
            y = self.conv_norm(y, name + ".dw_mid", mid, mid, b.kernel, b.stride, mid)
        y = self.conv_norm(y, name + ".pw_proj", mid, b.cout, 1, act=False)
        if layer_scale:
            y = self.scale(y, name + ".layer_scale", b.cout)
        if skip and b.stride == 1 and b.cin == b.cout:
            y = self.g.op("Add", y, x)
        return y

    def attention(self, x: Any, name: str, b: Block, size: int) -> Any:
        """MobileAttention with MultiQueryAttention2d: h query heads, one key and value."""
        g, c, h, d = self.g, b.cin, b.heads, b.dim
        y = self.norm(x, name + ".norm", c)
        q = self.conv(y, name + ".attn.query.proj", c, h * d, 1)
        q = g.op("Transpose", g.op("Reshape", q, self.i64([0, h, d, -1])), perm=[0, 1, 3, 2])

        def key_value(part: str) -> Any:
            z = y
            if b.kv_stride > 1:
                z = self.conv(z, f"{name}.attn.{part}.down_conv", c, c, b.kernel, b.kv_stride, c)
                z = self.norm(z, f"{name}.attn.{part}.norm", c)
            z = self.conv(z, f"{name}.attn.{part}.proj", c, d, 1)
            return g.op("Reshape", z, self.i64([0, 1, d, -1]))  # [B, 1, d, P]

        k, v = key_value("key"), key_value("value")
        scores = g.op("Mul", g.op("MatMul", q, k), g.const(np.float32(d**-0.5)))
        weights = g.op("Softmax", scores, axis=-1)
        o = g.op("MatMul", weights, g.op("Transpose", v, perm=[0, 1, 3, 2]))  # [B, h, L, d]
        o = g.op(
            "Reshape", g.op("Transpose", o, perm=[0, 1, 3, 2]), self.i64([0, h * d, size, size])
        )
        o = self.conv(o, name + ".attn.output.proj", h * d, b.cout, 1)
        o = self.scale(o, name + ".layer_scale", b.cout)
        return g.op("Add", o, x) if b.stride == 1 and b.cin == b.cout else o


def tower_graph(g: GraphBuilder, pixels: Any, multiplier: float, size: int) -> Any:
    """MobileNetV5Encoder.forward_features: [N, 3, size, size] → [N, 2048, 16, 16]."""
    t = _Tower(g)
    stem = _STEM if multiplier < 1.0 else make_divisible(_STEM * multiplier)
    x = t.conv(pixels, TOWER + "conv_stem.conv", 3, stem, 3, 2)
    x = g.op(
        "Add",
        x,
        g.op("Reshape", g.weight(TOWER + "conv_stem.conv.bias", [stem]), t.i64([1, stem, 1, 1])),
    )
    x = t.norm(x, TOWER + "conv_stem.bn", stem, act=True)
    size = _same(size, 2)
    taps: list[tuple[Any, int, int]] = []  # each stage's output, channels and size
    for s, stage in enumerate(blocks(multiplier)):
        for i, b in enumerate(stage):
            name = f"{TOWER}blocks.{s}.{i}"
            if b.kind == "er":
                x = t.edge(x, name, b)
            elif b.kind == "uir":
                x = t.inverted(x, name, b)
            else:  # its stride only decides the skip; the size stays
                x = t.attention(x, name, b, size)
            if b.kind != "mqa":
                size = _same(size, b.stride)
        taps.append((x, stage[-1].cout, size))
    (low, c_low, s_low), (top, _, s_top) = taps[-2], taps[-1]
    if s_top < s_low:  # F.interpolate's "nearest": source index floor(i · in / out)
        top = t.resize(
            top, s_low, mode="nearest", coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )  # fmt: skip
    x = g.op("Concat", low, top, axis=1)
    ffn = Block("uir", c_low + taps[-1][1], FEATURES, 1, 0, expand=2.0)
    x = t.inverted(x, TOWER + "msfa.ffn", ffn, skip=False, layer_scale=False)
    if s_low != GRID:
        if s_low % GRID:  # F.interpolate's bilinear, align_corners=False, no antialias
            x = t.resize(x, GRID, mode="linear", coordinate_transformation_mode="half_pixel")
        else:
            k = s_low // GRID
            x = g.op("AveragePool", x, kernel_shape=[k, k], strides=[k, k])
    return t.norm(x, TOWER + "msfa.norm", FEATURES)


def soft_tokens(g: GraphBuilder, features: Any, cfg: Cfg) -> Any:
    """get_image_features after the tower: [N, 2048, 16, 16] → [N, 256, text hidden]."""
    width = int(cfg.get("vision_config.hidden_size", FEATURES))
    if width != FEATURES:
        raise MmforgeError(
            f"vision_config.hidden_size is {width}; timm's MobileNetV5 encoder gives {FEATURES}",
            "The checkpoint's config.json is inconsistent; use the release's",
        )
    hidden = int(cfg.get("text_config.hidden_size"))
    eps = float(cfg.get("vision_config.rms_norm_eps", 1e-6))
    shape = g.const(np.array([0, FEATURES, GRID * GRID], dtype=np.int64))
    x = g.op("Transpose", g.op("Reshape", features, shape), perm=[0, 2, 1])
    x = g.op("Mul", x, g.const(np.float32(FEATURES**0.5)))
    x = rms_norm(g, x, EMBEDDER + "soft_embedding_norm", FEATURES, eps)
    x = g.linear(x, EMBEDDER + "embedding_projection", FEATURES, hidden, bias=False)
    return rms_norm(g, x, None, hidden, eps)


def vision_graph(cfg: Cfg, size: int) -> Any:
    """The package's vision graph: `pixel_values` [N, 3, size, size] → `image_features`."""
    g = GraphBuilder("gemma3n_vision")
    pixels = g.input("pixel_values", g.ir.DataType.FLOAT, ["num_images", 3, size, size])
    features = tower_graph(g, pixels, channel_multiplier(cfg), size)
    g.output(soft_tokens(g, features, cfg), "image_features")
    return g.model()
