"""GLM-4.5V's decoder (GLM-4.5's mixture of experts with M-RoPE) as an ONNX graph.

Follows transformers 5.24's Glm4vMoeTextModel + lm_head (`models/glm4v_moe/
modeling_glm4v_moe.py`): per layer an RMSNorm, attention (q/k/v biases when
`attention_bias`, `head_dim` wide heads, rotary on the first head_dim·partial_rotary_factor
dims by halves (rotate_half) with M-RoPE sections, key/value heads shared by query groups),
the residual, an RMSNorm and the MLP, the residual. The first `first_k_dense_replace`
layers have a dense SwiGLU MLP of `intermediate_size`; the others Glm4vMoeTextMoE:
- the router (Glm4vMoeTextTopkRouter) in float32: sigmoid of `mlp.gate` [E, H]; the
  choice adds `e_score_correction_bias` (the weights do not); experts are split into
  `n_group` groups, each group scored by the sum of its two best choices, the
  `topk_group` best groups kept, and `num_experts_per_tok` experts chosen among them;
  their sigmoid scores, divided by their sum (+1e-20) when `norm_topk_prob`, times
  `routed_scaling_factor`, weight their outputs;
- each expert SwiGLU of `moe_intermediate_size`; every expert runs on every token and
  its output is weighted by the token's routing weight (zero when not chosen), so the
  sum is transformers' sparse dispatch (the repo's portable MoE form, as for Qwen3-VL MoE
  and Gemma 4's expert blocks); each expert's projections are 2-D MatMuls, which int4
  quantizes as it does every decoder MatMul;
- plus the shared experts: one SwiGLU MLP of moe_intermediate_size·n_shared_experts.

Weights keep the checkpoint's names; experts are one Linear per expert and projection
(`mlp.experts.<e>.gate_proj.weight`, ...), as the release stores them and as transformers 5
saves them (it fuses them in memory only: conversion_mapping.py, "qwen2_moe").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.families._base import Cfg
from mmforge.backend.families.components.graph_builder import GraphBuilder
from mmforge.backend.families.glm4v.decoder import DecoderFrame, text_value


def moe_settings(cfg: Cfg) -> dict[str, Any]:
    """The router's and experts' settings, transformers' defaults where the config is silent."""
    t = text_value(cfg)
    experts = int(t("n_routed_experts", t("num_local_experts", 128)))
    groups = int(t("n_group", 1))
    settings = {
        "experts": experts,
        "top_k": int(t("num_experts_per_tok", 8)),
        "groups": groups,
        "topk_group": int(t("topk_group", 1)),
        "norm_topk_prob": bool(t("norm_topk_prob", True)),
        "scaling": float(t("routed_scaling_factor", 1.0)),
        "shared": int(t("n_shared_experts", 1)),
        "width": int(t("moe_intermediate_size", 1408)),
        "first_dense": int(t("first_k_dense_replace", 1)),
    }
    if experts % groups:
        raise ValueError(f"n_routed_experts {experts} is not a multiple of n_group {groups}")
    if experts // groups < 2:
        raise ValueError(
            "each expert group needs two experts (transformers scores a group by its top 2)"
        )
    if not 1 <= settings["topk_group"] <= groups:
        raise ValueError(f"topk_group {settings['topk_group']} is not within 1..n_group {groups}")
    if settings["top_k"] > settings["topk_group"] * experts // groups:
        raise ValueError("num_experts_per_tok exceeds the experts of the kept groups")
    return settings


def head_dim(cfg: Cfg) -> int:
    """Each head's width: `head_dim` when the config says it, else hidden / heads."""
    t = text_value(cfg)
    explicit = t("head_dim")
    return int(explicit) if explicit else int(t("hidden_size")) // int(t("num_attention_heads"))


def _swiglu(g: GraphBuilder, y: Any, p: str, hidden: int, inner: int) -> Any:
    gate = g.linear(y, p + "gate_proj", hidden, inner, False)
    up = g.linear(y, p + "up_proj", hidden, inner, False)
    return g.linear(
        g.op("Mul", g.op("Mul", gate, g.op("Sigmoid", gate)), up),
        p + "down_proj",
        inner,
        hidden,
        False,
    )


def _top_k(g: GraphBuilder, x: Any, k: int, i64: Any) -> tuple[Any, Any]:
    """The k largest along the last axis and their indices (TopK's two outputs)."""
    node = g.ir.node("TopK", inputs=[x, i64([k])], attributes={"axis": -1}, num_outputs=2)
    g.graph.append(node)
    return node.outputs[0], node.outputs[1]


def _filled(g: GraphBuilder, like: Any, value: float) -> Any:
    """A float32 tensor of `like`'s shape, every element `value`."""
    return g.op(
        "ConstantOfShape", g.op("Shape", like), value=g.ir.tensor(np.array([value], np.float32))
    )


def _routing(frame: DecoderFrame, y: Any, p: str, m: dict[str, Any]) -> Any:
    """Glm4vMoeTextTopkRouter as dense routing weights [B, S, E] (zero where not chosen)."""
    g, i64 = frame.g, frame.i64
    experts, groups = m["experts"], m["groups"]
    per_group = experts // groups
    router = g.weight(p + "gate.weight", [experts, frame.hidden])
    logits = g.op("MatMul", y, g.op("Transpose", router, perm=[1, 0]))
    scores = g.op("Sigmoid", logits)  # [B, S, E]
    choice = g.op("Add", scores, g.weight(p + "gate.e_score_correction_bias", [experts]))
    grouped = g.op("Reshape", choice, i64([0, 0, groups, per_group]))
    best_two, _ = _top_k(g, grouped, 2, i64)
    group_scores = g.op("ReduceSum", best_two, i64([-1]), keepdims=0)  # [B, S, G]
    _, kept = _top_k(g, group_scores, m["topk_group"], i64)  # [B, S, kept groups]
    group_mask = g.op(
        "ScatterElements", _filled(g, group_scores, 0.0), kept, _filled(g, kept, 1.0), axis=-1
    )
    expert_mask = g.op(
        "Reshape",
        g.op("Expand", g.op("Unsqueeze", group_mask, i64([3])), i64([1, 1, 1, per_group])),
        i64([0, 0, experts]),
    )
    masked = g.op(
        "Where",
        g.op("Greater", expert_mask, g.const(np.float32(0.5))),
        choice,
        g.const(np.float32(-np.inf)),
    )
    _, chosen = _top_k(g, masked, m["top_k"], i64)  # [B, S, k]
    weights = g.op("GatherElements", scores, chosen, axis=-1)  # [B, S, k]
    if m["norm_topk_prob"]:
        total = g.op(
            "Add", g.op("ReduceSum", weights, i64([-1]), keepdims=1), g.const(np.float32(1e-20))
        )
        weights = g.op("Div", weights, total)
    weights = g.op("Mul", weights, g.const(np.float32(m["scaling"])))
    return g.op("ScatterElements", _filled(g, scores, 0.0), chosen, weights, axis=-1)


def _moe(frame: DecoderFrame, y: Any, p: str, m: dict[str, Any]) -> Any:
    g, i64, hidden = frame.g, frame.i64, frame.hidden
    routing = _routing(frame, y, p + "mlp.", m)
    out = None
    for e in range(m["experts"]):
        expert = _swiglu(g, y, f"{p}mlp.experts.{e}.", hidden, m["width"])
        weight = g.op("Slice", routing, i64([e]), i64([e + 1]), i64([2]))  # [B, S, 1]
        term = g.op("Mul", expert, weight)
        out = term if out is None else g.op("Add", out, term)
    shared = _swiglu(g, y, p + "mlp.shared_experts.", hidden, m["width"] * m["shared"])
    return g.op("Add", out, shared)


def moe_decoder_graph(
    cfg: Cfg, prefix: str = "model.language_model.", head: str = "lm_head"
) -> Any:
    """The GLM-4.5V decoder, weights under the checkpoint's names (text_config values)."""
    t = text_value(cfg)
    hidden, inter = int(t("hidden_size")), int(t("intermediate_size"))
    m = moe_settings(cfg)
    g = GraphBuilder("glm4v_moe_decoder")
    frame = DecoderFrame(
        g, cfg, head_dim(cfg), interleaved=False, qkv_bias=bool(t("attention_bias", True))
    )
    x = frame.x
    for i in range(frame.layers):
        p = f"{prefix}layers.{i}."
        x = g.op("Add", x, frame.attention(frame.rms_norm(x, p + "input_layernorm"), i, p))
        y = frame.rms_norm(x, p + "post_attention_layernorm")
        if i < m["first_dense"]:
            y = _swiglu(g, y, p + "mlp.", hidden, inter)
        else:
            y = _moe(frame, y, p, m)
        x = g.op("Add", x, y)
    return frame.finish(x, prefix, head)
