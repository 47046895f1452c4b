"""GLM-4.1V's decoder (GLM-4 with M-RoPE) as an ONNX graph in the runtime's decoder contract.

Follows transformers 5.24's Glm4vTextModel + lm_head: per layer RMSNorm, attention with
q/k/v biases, rotary on the first head_dim·partial_rotary_factor dims over interleaved pairs
with M-RoPE (frequency j takes its angle from position row t, h or w by mrope_section), the
key/value heads shared by query groups, an RMSNorm after attention and one after the MLP
(gate_up_proj halves, SiLU). Inputs are the qwen2_5_vl pipeline's: inputs_embeds,
attention_mask [B, past + S], position_ids [3, B, S] and past_key_values.%d.key/value
[B, kv heads, past, head_dim]; outputs logits and present.%d.key/value.

GLM-4.1V's packages use it (build.py); tests/backend/test_glm4v_decoder.py holds it to
transformers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.families._base import Cfg
from mmforge.backend.families.glm4v.vision import _rms_norm
from mmforge.backend.families.lfm2.ops import GraphBuilder


def _rotate_pairs(g: GraphBuilder, x: Any, i64: Any) -> Any:
    """(x0, x1, x2, x3, ...) → (-x1, x0, -x3, x2, ...) on the last axis."""
    pairs = g.op("Reshape", x, i64([0, 0, 0, -1, 2]))
    even = g.slice(pairs, 0, 1, -1)
    odd = g.slice(pairs, 1, 2, -1)
    turned = g.op("Concat", g.op("Neg", odd), even, axis=-1)
    return g.op("Reshape", turned, i64([0, 0, 0, -1]))


def decoder_graph(cfg: Cfg, prefix: str = "model.language_model.", head: str = "lm_head") -> Any:
    """The decoder, weights under the checkpoint's names (text_config values)."""

    def t(k: Any, d: Any = None) -> Any:
        return cfg.first("text_config." + k, k, default=d)

    hidden, layers = int(t("hidden_size")), int(t("num_hidden_layers"))
    heads, kv = int(t("num_attention_heads")), int(t("num_key_value_heads"))
    inter, vocab, eps = int(t("intermediate_size")), int(t("vocab_size")), float(t("rms_norm_eps"))
    # transformers 5 names them rope_parameters; releases (transformers 4) write rope_theta
    # and partial_rotary_factor beside rope_scaling {"mrope_section": ...}.
    rope = t("rope_parameters") or {}
    legacy = t("rope_scaling") or {}
    theta = float(rope.get("rope_theta", t("rope_theta", 10000.0)))
    partial = float(rope.get("partial_rotary_factor", t("partial_rotary_factor", 1.0)))
    sections = list(rope.get("mrope_section", legacy.get("mrope_section", [8, 12, 12])))
    hd = hidden // heads
    rot = int(hd * partial)
    if t("hidden_act", "silu") != "silu":
        raise ValueError(f"text_config.hidden_act {t('hidden_act')!r}: the graph has SiLU only")
    if sum(sections) != rot // 2:
        raise ValueError(f"mrope_section {sections} does not cover {rot // 2} rotary frequencies")

    g = GraphBuilder("glm4v_decoder")
    ir = g.ir
    f32, i64t = ir.DataType.FLOAT, ir.DataType.INT64

    def i64(a: Any) -> Any:
        return g.const(np.array(a, dtype=np.int64))

    x = g.input("inputs_embeds", f32, ["batch", "seq", hidden])
    mask = g.input("attention_mask", i64t, ["batch", "total"])
    pos = g.input("position_ids", i64t, [3, "batch", "seq"])
    pasts = [
        (
            g.input(f"past_key_values.{i}.key", f32, ["batch", kv, "past", hd]),
            g.input(f"past_key_values.{i}.value", f32, ["batch", kv, "past", hd]),
        )
        for i in range(layers)
    ]

    # M-RoPE angles: frequency j uses position row (its section's index mod 3).
    inv = (1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float32) / rot)).astype(np.float32)
    rows = np.concatenate([np.full(n, i % 3) for i, n in enumerate(sections)])
    pick = np.stack([(rows == r) * inv for r in range(3)]).astype(np.float32)  # [3, rot/2]
    angles = g.op(
        "Mul",
        g.op("Unsqueeze", g.op("Cast", pos, to=1), i64([3])),
        g.const(pick.reshape(3, 1, 1, -1)),
    )
    angles = g.op("ReduceSum", angles, i64([0]), keepdims=0)  # [B, S, rot/2]
    angles = g.op(
        "Reshape",
        g.op("Concat", *[g.op("Unsqueeze", angles, i64([3]))] * 2, axis=3),
        i64([0, 0, -1]),
    )
    cos = g.op("Unsqueeze", g.op("Cos", angles), i64([1]))  # [B, 1, S, rot]
    sin = g.op("Unsqueeze", g.op("Sin", angles), i64([1]))

    # Causal over past + new positions, and the padding the mask names.
    seq = g.op("Gather", g.op("Shape", x), i64(1), axis=0)
    total = g.op("Gather", g.op("Shape", mask), i64(1), axis=0)
    qi = g.op("Add", g.op("Range", i64(0), seq, i64(1)), g.op("Sub", total, seq))
    kj = g.op("Range", i64(0), total, i64(1))
    causal = g.op("LessOrEqual", g.op("Unsqueeze", kj, i64([0])), g.op("Unsqueeze", qi, i64([1])))
    keep = g.op(
        "And",
        g.op("Unsqueeze", causal, i64([0, 1])),
        g.op("Unsqueeze", g.op("Cast", mask, to=9), i64([1, 2])),
    )
    bias = g.op(
        "Where", keep, g.const(np.float32(0.0)), g.const(np.float32(np.finfo(np.float32).min))
    )
    scale = g.const(np.float32(hd**-0.5))

    def rotary(v: Any) -> Any:
        head_rot, rest = g.slice(v, 0, rot, -1), g.slice(v, rot, hd, -1)
        turned = g.op(
            "Add", g.op("Mul", head_rot, cos), g.op("Mul", _rotate_pairs(g, head_rot, i64), sin)
        )
        return g.op("Concat", turned, rest, axis=-1)

    def split_heads(v: Any, n: int) -> Any:
        return g.op("Transpose", g.op("Reshape", v, i64([0, 0, n, hd])), perm=[0, 2, 1, 3])

    def shared(v: Any) -> Any:  # [B, kv, T, hd] → [B, heads, T, hd]
        tiled = g.op("Tile", g.op("Unsqueeze", v, i64([2])), i64([1, 1, heads // kv, 1, 1]))
        return g.op("Reshape", tiled, i64([0, heads, -1, hd]))

    for i, (past_k, past_v) in enumerate(pasts):
        p = f"{prefix}layers.{i}."
        y = _rms_norm(g, x, p + "input_layernorm", hidden, eps)
        q = rotary(split_heads(g.linear(y, p + "self_attn.q_proj", hidden, heads * hd), heads))
        k = rotary(split_heads(g.linear(y, p + "self_attn.k_proj", hidden, kv * hd), kv))
        v = split_heads(g.linear(y, p + "self_attn.v_proj", hidden, kv * hd), kv)
        k = g.op("Concat", past_k, k, axis=2)
        v = g.op("Concat", past_v, v, axis=2)
        g.output(k, f"present.{i}.key")
        g.output(v, f"present.{i}.value")
        scores = g.op(
            "Mul", g.op("MatMul", q, g.op("Transpose", shared(k), perm=[0, 1, 3, 2])), scale
        )
        att = g.op("MatMul", g.op("Softmax", g.op("Add", scores, bias), axis=-1), shared(v))
        att = g.op("Reshape", g.op("Transpose", att, perm=[0, 2, 1, 3]), i64([0, 0, -1]))
        att = g.linear(att, p + "self_attn.o_proj", heads * hd, hidden, False)
        x = g.op("Add", x, _rms_norm(g, att, p + "post_self_attn_layernorm", hidden, eps))
        y = _rms_norm(g, x, p + "post_attention_layernorm", hidden, eps)
        gate_up = g.linear(y, p + "mlp.gate_up_proj", hidden, 2 * inter, False)
        gate, up = g.slice(gate_up, 0, inter, -1), g.slice(gate_up, inter, 2 * inter, -1)
        y = g.op("Mul", up, g.op("Mul", gate, g.op("Sigmoid", gate)))
        y = g.linear(y, p + "mlp.down_proj", inter, hidden, False)
        x = g.op("Add", x, _rms_norm(g, y, p + "post_mlp_layernorm", hidden, eps))

    x = _rms_norm(g, x, prefix + "norm", hidden, eps)
    logits = g.linear(x, head, hidden, vocab, False)
    g.output(logits, "logits")
    g.graph.outputs.insert(0, g.graph.outputs.pop())  # logits first
    return g.model()
