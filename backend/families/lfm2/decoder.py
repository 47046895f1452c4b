"""LFM2-VL's decoder: ONNX Runtime GenAI's model builder, run in a child process.

The builder knows the runtime's conv-state contract; its weights are baked in, so
`builder_sources` says which checkpoint tensors each stands for (convert.weights compares
every one), and `add_conv_biases` adds the projection biases the builder drops.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg
from mmforge.backend.families.lfm2.vision import TEXT_PREFIX
from mmforge.backend.jobs import JobContext
from mmforge.backend.worker.child import app_command


def layer_kinds(cfg: Cfg) -> list[str]:
    """Each decoder layer's kind, "conv" or "full_attention", as transformers reads them.

    Older configs name the attention layers in `full_attn_idxs` instead of `layer_types`;
    with neither, every layer attends.
    """
    text = cfg.text
    n = int(text.get("num_hidden_layers"))
    kinds = text.get("layer_types")
    if kinds:
        return [str(k) for k in kinds]
    attention = text.get("full_attn_idxs")
    attention = set(range(n)) if attention is None else {int(i) for i in attention}
    return ["full_attention" if i in attention else "conv" for i in range(n)]


def builder_decoder(folder: Path, work: Path, ep: str, ctx: JobContext, layers: int) -> Path:
    """The LFM2 decoder from ONNX Runtime GenAI's model builder (inputs_embeds in).

    The builder runs in a child process so that cancel can stop it and its memory (it
    loads the whole checkpoint in torch) is returned when it ends. It always builds f32;
    int4 is quantized afterwards like every other decoder. Its "Reading layer N" lines
    become build progress.

    Returns:
        The builder's output folder (model.onnx, genai_config.json).
    """
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


def builder_sources(cfg: Cfg, tied: bool) -> dict[str, tuple[tuple[str, ...], str]]:
    """Builder initializer -> (checkpoint tensors, how they combine) for the LFM2 decoder.

    `tied`: the output layer is the token embedding (`Checkpoint.output_tied`).

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
    head = TEXT_PREFIX + "embed_tokens.weight" if tied else "lm_head.weight"
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

    from mmforge.backend.errors import LayoutError
    from mmforge.backend.tensors import read_tensor, safetensors_headers

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
