"""LFM2-VL graphs: our SigLIP2 NaFlex vision tower and embedding, the GenAI builder's decoder.

mobius 0.1 has no LFM2. The vision tower and the embedding are written here, op by op,
with the checkpoint's own tensor names as initializers, so weights and their report go
through the common path (weights.py). The hybrid conv/attention decoder comes from ONNX
Runtime GenAI's model builder, which knows the runtime's conv-state contract; its weights
are baked in, so weights.check_baked compares every one with the checkpoint, and
add_conv_biases adds the projection biases the builder drops.

The vision graph follows transformers 5's Lfm2VlModel.get_image_features exactly:
- patch embedding (Linear on already patchified pixels) plus the learned position grid
  resized per image to its patch rows × columns with an antialiased bilinear filter
  (written as two small weight matrices, as transformers computes it);
- the SigLIP2 encoder with padded patches masked out of attention, then post-layernorm;
- each image's `factor`×`factor` patch blocks gathered into tokens (pixel unshuffle),
  padding dropped, then the projector (LayerNorm → Linear → GELU → Linear).
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg
from mmforge.backend.families.lfm2 import layer_kinds
from mmforge.backend.jobs import JobContext

VISION_PREFIX = "model.vision_tower."
PROJECTOR_PREFIX = "model.multi_modal_projector."
TEXT_PREFIX = "model.language_model."
_OPSET = 18
# Every checkpoint tensor under these names is used by transformers' Lfm2Vl (the SigLIP2
# pooling head, when present, is not).
MUST_USE = (
    TEXT_PREFIX,
    PROJECTOR_PREFIX,
    VISION_PREFIX + "embeddings.",
    VISION_PREFIX + "encoder.",
    VISION_PREFIX + "post_layernorm.",
)


class _Graph:
    """A small op-by-op builder over onnx_ir."""

    def __init__(self, name: str):
        import onnx_ir as ir

        self.ir = ir
        self.graph = ir.Graph(
            inputs=[], outputs=[], nodes=[], name=name, opset_imports={"": _OPSET}
        )
        self._consts = 0

    def input(self, name: str, dtype: Any, shape: list[Any]) -> Any:
        value = self.ir.Value(name=name, type=self.ir.TensorType(dtype), shape=self.ir.Shape(shape))
        self.graph.inputs.append(value)
        return value

    def weight(self, name: str, shape: list[int]) -> Any:
        """An initializer the checkpoint fills (no value yet)."""
        ir = self.ir
        value = ir.Value(
            name=name, type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(list(shape))
        )
        self.graph.initializers[name] = value  # register_initializer wants a value
        return value

    def const(self, array: Any) -> Any:
        self._consts += 1
        name = f"mmforge_const_{self._consts}"
        value = self.ir.Value(name=name, const_value=self.ir.tensor(np.asarray(array), name=name))
        self.graph.register_initializer(value)
        return value

    def op(self, op_type: str, *inputs: Any, **attrs: Any) -> Any:
        node = self.ir.node(op_type, inputs=list(inputs), attributes=attrs)
        self.graph.append(node)
        return node.outputs[0]

    def output(self, value: Any, name: str) -> None:
        value.name = name
        self.graph.outputs.append(value)

    def model(self) -> Any:
        return self.ir.Model(self.graph, ir_version=10, producer_name="mmforge")

    # Layers -------------------------------------------------------------------------

    def linear(self, x: Any, prefix: str, n_in: int, n_out: int, bias: bool = True) -> Any:
        w = self.weight(prefix + ".weight", [n_out, n_in])
        y = self.op("MatMul", x, self.op("Transpose", w, perm=[1, 0]))
        return self.op("Add", y, self.weight(prefix + ".bias", [n_out])) if bias else y

    def layer_norm(self, x: Any, prefix: str, size: int, eps: float) -> Any:
        scale = self.weight(prefix + ".weight", [size])
        return self.op(
            "LayerNormalization",
            x,
            scale,
            self.weight(prefix + ".bias", [size]),
            epsilon=eps,
            axis=-1,
        )

    def gelu(self, x: Any, tanh: bool) -> Any:
        half_x = self.op("Mul", x, self.const(np.float32(0.5)))
        if tanh:  # gelu_pytorch_tanh
            cube = self.op("Mul", self.op("Mul", x, x), x)
            inner = self.op("Add", x, self.op("Mul", cube, self.const(np.float32(0.044715))))
            t = self.op(
                "Tanh", self.op("Mul", inner, self.const(np.float32(math.sqrt(2 / math.pi))))
            )
        else:
            t = self.op("Erf", self.op("Mul", x, self.const(np.float32(1 / math.sqrt(2)))))
        return self.op("Mul", half_x, self.op("Add", t, self.const(np.float32(1.0))))

    def slice(self, x: Any, start: int, end: int, axis: int) -> Any:
        return self.op(
            "Slice", x, self.const(np.array([start])), self.const(np.array([end])),
            self.const(np.array([axis])),
        )  # fmt: skip


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

    g = _Graph("lfm2_vl_vision")
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
    g: _Graph, shapes: Any, pixels: Any, prefix: str, grid: int, hidden: int
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


def _token_blocks(g: _Graph, x: Any, shapes: Any, factor: int, hidden: int) -> Any:
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
    g = _Graph("lfm2_vl_embedding")
    ids = g.input("input_ids", ir.DataType.INT64, ["batch_size", "sequence_length"])
    features = g.input("image_features", ir.DataType.FLOAT, ["num_image_tokens", hidden])
    table = g.weight(TEXT_PREFIX + "embed_tokens.weight", [vocab, hidden])
    embeds = g.op("Gather", table, ids, axis=0)
    has_features = g.op("Greater", g.op("Size", features), g.const(np.int64(0)))
    slots = g.op("And", g.op("Equal", ids, g.const(np.int64(image_token))), has_features)
    where = g.op("Transpose", g.op("NonZero", slots), perm=[1, 0])  # [M, 2]
    g.output(g.op("ScatterND", embeds, where, features), "inputs_embeds")
    return g.model()


def builder_decoder(folder: Path, work: Path, ep: str, ctx: JobContext, layers: int) -> Path:
    """The LFM2 decoder from ONNX Runtime GenAI's model builder (inputs_embeds in).

    The builder runs in a child process so that cancel can stop it and its memory (it
    loads the whole checkpoint in torch) is returned when it ends. It always builds f32;
    int4 is quantized afterwards like every other decoder. Its "Reading layer N" lines
    become build progress.

    Returns:
        The builder's output folder (model.onnx, genai_config.json).
    """
    from mmforge.backend.worker import app_command

    out = work / "decoder"
    work.mkdir(parents=True, exist_ok=True)
    cmd = app_command(
        "genai-builder",
        "-i", str(folder), "-o", str(out), "-p", "fp32", "-e", ep,
        "-c", str(work / "cache"), "--extra_options", "exclude_embeds=true", "hf_token=false",
    )  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log_path = work / "builder.log"
    total = layers + 2  # the layers, then writing, then done
    ctx.report("build", 0, total, unit="layers", message="decoder: ONNX Runtime GenAI builder")
    with open(log_path, "wb") as sink, open(log_path, "rb") as source:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env)
        seen = ""
        try:
            while proc.poll() is None:
                ctx.check_cancel()  # raises Cancelled; the child is killed below
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=0.2)
                seen = (seen + source.read().decode("utf-8", "replace"))[-4096:]
                _report_builder(seen, layers, total, ctx)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        seen += source.read().decode("utf-8", "replace")
    tail = [line for line in seen.strip().splitlines() if line.strip()][-3:]
    if proc.returncode != 0 or not (out / "model.onnx").is_file():
        raise MmforgeError(
            "Building the LFM2 decoder failed: " + (" / ".join(tail) or f"exit {proc.returncode}"),
            "This checkpoint's text model is not supported by the ONNX Runtime GenAI builder; "
            "its output is in the error's details (--verbose on the command line)",
            details=seen[-4000:],
        )
    return out


def _report_builder(text: str, layers: int, total: int, ctx: JobContext) -> None:
    """Turn the builder's latest progress line into a progress event."""
    import re

    if "Saving ONNX model" in text:
        ctx.report("build", layers + 1, total, unit="layers", message="decoder: writing")
        return
    found = re.findall(r"Reading layer (\d+)", text)
    if found:
        layer = int(found[-1])
        ctx.report(
            "build", layer + 1, total, unit="layers", message=f"decoder: layer {layer + 1}/{layers}"
        )


def builder_sources(cfg: Cfg) -> dict[str, tuple[tuple[str, ...], str]]:
    """Builder initializer -> (checkpoint tensors, how they combine) for the LFM2 decoder.

    The ways of combining are weights.BAKED_KINDS: the projections' MatMul weights are
    transposed, the attention projections fused as "qkv", the rotary tables computed.
    """
    text = cfg.text
    layer_types = layer_kinds(cfg)
    n = int(text.get("num_hidden_layers"))
    out: dict[str, tuple[tuple[str, ...], str]] = {}
    for i in range(n):
        src, dst = f"{TEXT_PREFIX}layers.{i}.", f"model.layers.{i}."
        out[dst + "operator_layernorm.weight"] = ((src + "operator_norm.weight",), "same")
        out[dst + "ffn_layernorm.weight"] = ((src + "ffn_norm.weight",), "same")
        for w, name in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
            out[f"{dst}mlp.{name}.MatMul.weight"] = ((f"{src}feed_forward.{w}.weight",), "t")
        if i < len(layer_types) and layer_types[i] == "full_attention":
            qkv = tuple(f"{src}self_attn.{p}_proj.weight" for p in "qkv")
            out[dst + "attn.qkv_proj.MatMul.weight"] = (qkv, "qkv")
            out[dst + "attn.q_norm.layernorm.weight"] = (
                (src + "self_attn.q_layernorm.weight",),
                "same",
            )
            out[dst + "attn.k_norm.layernorm.weight"] = (
                (src + "self_attn.k_layernorm.weight",),
                "same",
            )
            out[dst + "attn.o_proj.MatMul.weight"] = ((src + "self_attn.out_proj.weight",), "t")
        else:
            out[dst + "conv.in_proj.MatMul.weight"] = ((src + "conv.in_proj.weight",), "t")
            out[dst + "conv.conv.weight"] = ((src + "conv.conv.weight",), "same")
            out[dst + "conv.out_proj.MatMul.weight"] = ((src + "conv.out_proj.weight",), "t")
            if text.get("conv_bias"):
                for part in ("in_proj", "out_proj"):  # added by add_conv_biases
                    out[f"{dst}conv.{part}.bias"] = ((f"{src}conv.{part}.bias",), "same")
                out[dst + "conv.conv.bias"] = ((src + "conv.conv.bias",), "same")
    out[f"model.layers.{n}.final_norm_layernorm.weight"] = (
        (TEXT_PREFIX + "embedding_norm.weight",),
        "same",
    )
    head = (
        "lm_head.weight"
        if not text.get("tie_word_embeddings", True)
        else TEXT_PREFIX + "embed_tokens.weight"
    )
    out["lm_head.MatMul.weight"] = ((head,), "t")
    for table in ("cos_cache", "sin_cache"):  # rotary tables the builder computes
        out[table] = ((), "computed")
    return out


def add_conv_biases(decoder: Any, cfg: Cfg, folder: Path) -> str | None:
    """Add the short convolutions' in_proj/out_proj biases, which the builder leaves out.

    With `conv_bias`, transformers' Lfm2ShortConv has biases on both projections; the
    ORT GenAI builder (0.18) keeps only the convolution's own bias, so such a checkpoint
    would compute wrong logits. Each bias is added after its MatMul, with the checkpoint's
    values (check_baked compares them again when the decoder is written).

    Returns:
        A line for the manifest, or None when the checkpoint has no such biases.
    """
    import onnx_ir as ir

    from mmforge.backend.checkpoint import read_tensor, safetensors_headers
    from mmforge.backend.errors import LayoutError

    if not cfg.text.get("conv_bias"):
        return None
    where = {
        name: path
        for path, header in (safetensors_headers(folder) or {}).items()
        for name in header
    }
    graph = decoder.graph
    nodes = {node.name: node for node in graph}
    added = 0
    for i, kind in enumerate(layer_kinds(cfg)):
        if kind != "conv":
            continue
        for part in ("in_proj", "out_proj"):
            source = f"{TEXT_PREFIX}layers.{i}.conv.{part}.bias"
            matmul = nodes.get(f"/model/layers.{i}/conv/{part}/MatMul")
            if matmul is None or source not in where:
                raise LayoutError(f"Cannot place {source} in the builder's decoder")
            name = f"model.layers.{i}.conv.{part}.bias"
            array = read_tensor(where[source], source).float().numpy()
            bias = ir.Value(
                name=name,
                type=ir.TensorType(ir.DataType.FLOAT),
                shape=ir.Shape(list(array.shape)),
                const_value=ir.tensor(array, name=name),
            )
            graph.register_initializer(bias)
            product = matmul.outputs[0]
            add = ir.node("Add", inputs=[product, bias], name=f"{matmul.name}/bias")
            graph.insert_after(matmul, add)
            product.replace_all_uses_with(add.outputs[0])
            add.replace_input_with(0, product)  # the line above rewired this one too
            added += 1
    return f"Decoder: {added} short-convolution projection biases added (the builder drops them)"
