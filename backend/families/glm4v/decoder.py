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
from mmforge.backend.families.components.graph_builder import GraphBuilder
from mmforge.backend.families.glm4v.vision import _rms_norm, _rotate_half


def _rotate_pairs(g: GraphBuilder, x: Any, i64: Any) -> Any:
    """(x0, x1, x2, x3, ...) → (-x1, x0, -x3, x2, ...) on the last axis."""
    pairs = g.op("Reshape", x, i64([0, 0, 0, -1, 2]))
    even = g.slice(pairs, 0, 1, -1)
    odd = g.slice(pairs, 1, 2, -1)
    turned = g.op("Concat", g.op("Neg", odd), even, axis=-1)
    return g.op("Reshape", turned, i64([0, 0, 0, -1]))


def text_value(cfg: Cfg) -> Any:
    """Reads a text-model field: text_config's value, else the top level's."""

    def t(k: Any, d: Any = None) -> Any:
        return cfg.first("text_config." + k, k, default=d)

    return t


def rope_settings(cfg: Cfg) -> tuple[float, float, list[int]]:
    """(rope_theta, partial_rotary_factor, mrope_section), under either generation's names.

    transformers 5 names them rope_parameters; releases (transformers 4) write rope_theta
    and partial_rotary_factor beside rope_scaling {"mrope_section": ...}.
    """
    t = text_value(cfg)
    rope = t("rope_parameters") or {}
    legacy = t("rope_scaling") or {}
    theta = float(rope.get("rope_theta", t("rope_theta", 10000.0)))
    partial = float(rope.get("partial_rotary_factor", t("partial_rotary_factor", 1.0)))
    sections = list(rope.get("mrope_section", legacy.get("mrope_section", [8, 12, 12])))
    return theta, partial, sections


class DecoderFrame:
    """What every GLM decoder layer shares: the inputs, M-RoPE, the mask, attention.

    Args:
        g: The graph being built.
        cfg: The checkpoint's config.
        head_dim: Each attention head's width.
        interleaved: GLM-4.1V rotates interleaved pairs (x0, x1) with each angle repeated
            in place; GLM-4.5V rotates halves (rotate_half) with the angles concatenated.
        qkv_bias: q, k and v projections carry biases.
    """

    def __init__(self, g: GraphBuilder, cfg: Cfg, head_dim: int, interleaved: bool, qkv_bias: bool):
        t = text_value(cfg)
        self.g = g
        self.hidden, self.layers = int(t("hidden_size")), int(t("num_hidden_layers"))
        self.heads, self.kv = int(t("num_attention_heads")), int(t("num_key_value_heads"))
        self.vocab, self.eps = int(t("vocab_size")), float(t("rms_norm_eps"))
        self.hd, self.interleaved, self.qkv_bias = head_dim, interleaved, qkv_bias
        theta, partial, sections = rope_settings(cfg)
        rot = int(head_dim * partial)
        self.rot = rot
        if t("hidden_act", "silu") != "silu":
            raise ValueError(f"text_config.hidden_act {t('hidden_act')!r}: the graph has SiLU only")
        if sum(sections) != rot // 2:
            raise ValueError(
                f"mrope_section {sections} does not cover {rot // 2} rotary frequencies"
            )
        ir = g.ir
        f32, i64t = ir.DataType.FLOAT, ir.DataType.INT64
        hidden, kv, hd = self.hidden, self.kv, head_dim
        self.x = g.input("inputs_embeds", f32, ["batch", "seq", hidden])
        mask = g.input("attention_mask", i64t, ["batch", "total"])
        pos = g.input("position_ids", i64t, [3, "batch", "seq"])
        self.pasts = [
            (
                g.input(f"past_key_values.{i}.key", f32, ["batch", kv, "past", hd]),
                g.input(f"past_key_values.{i}.value", f32, ["batch", kv, "past", hd]),
            )
            for i in range(self.layers)
        ]
        i64 = self.i64

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
        if interleaved:  # each angle twice in place: (a0, a0, a1, a1, ...)
            angles = g.op(
                "Reshape",
                g.op("Concat", *[g.op("Unsqueeze", angles, i64([3]))] * 2, axis=3),
                i64([0, 0, -1]),
            )
        else:  # the angles twice over: (a0, a1, ..., a0, a1, ...)
            angles = g.op("Concat", angles, angles, axis=-1)
        self.cos = g.op("Unsqueeze", g.op("Cos", angles), i64([1]))  # [B, 1, S, rot]
        self.sin = g.op("Unsqueeze", g.op("Sin", angles), i64([1]))

        # Causal over past + new positions, and the padding the mask names.
        seq = g.op("Gather", g.op("Shape", self.x), i64(1), axis=0)
        total = g.op("Gather", g.op("Shape", mask), i64(1), axis=0)
        qi = g.op("Add", g.op("Range", i64(0), seq, i64(1)), g.op("Sub", total, seq))
        kj = g.op("Range", i64(0), total, i64(1))
        causal = g.op(
            "LessOrEqual", g.op("Unsqueeze", kj, i64([0])), g.op("Unsqueeze", qi, i64([1]))
        )
        keep = g.op(
            "And",
            g.op("Unsqueeze", causal, i64([0, 1])),
            g.op("Unsqueeze", g.op("Cast", mask, to=9), i64([1, 2])),
        )
        self.bias = g.op(
            "Where", keep, g.const(np.float32(0.0)), g.const(np.float32(np.finfo(np.float32).min))
        )
        self.scale = g.const(np.float32(hd**-0.5))

    def i64(self, a: Any) -> Any:
        """An int64 constant."""
        return self.g.const(np.array(a, dtype=np.int64))

    def rms_norm(self, x: Any, name: str) -> Any:
        """An RMSNorm of the hidden width, with the decoder's epsilon."""
        return _rms_norm(self.g, x, name, self.hidden, self.eps)

    def _rotary(self, v: Any) -> Any:
        g, rot, hd = self.g, self.rot, self.hd
        head_rot, rest = g.slice(v, 0, rot, -1), g.slice(v, rot, hd, -1)
        if self.interleaved:
            turned = _rotate_pairs(g, head_rot, self.i64)
        else:
            turned = _rotate_half(g, head_rot, rot // 2)
        out = g.op("Add", g.op("Mul", head_rot, self.cos), g.op("Mul", turned, self.sin))
        return g.op("Concat", out, rest, axis=-1) if rot < hd else out

    def _split_heads(self, v: Any, n: int) -> Any:
        g = self.g
        return g.op(
            "Transpose", g.op("Reshape", v, self.i64([0, 0, n, self.hd])), perm=[0, 2, 1, 3]
        )

    def _shared(self, v: Any) -> Any:  # [B, kv, T, hd] → [B, heads, T, hd]
        g, heads, kv = self.g, self.heads, self.kv
        tiled = g.op(
            "Tile", g.op("Unsqueeze", v, self.i64([2])), self.i64([1, 1, heads // kv, 1, 1])
        )
        return g.op("Reshape", tiled, self.i64([0, heads, -1, self.hd]))

    def attention(self, y: Any, i: int, p: str) -> Any:
        """Layer i's self-attention on y (already normed), its cache out, o_proj applied."""
        g, hidden, heads, kv, hd = self.g, self.hidden, self.heads, self.kv, self.hd
        past_k, past_v = self.pasts[i]
        b = self.qkv_bias
        q = self._rotary(
            self._split_heads(g.linear(y, p + "self_attn.q_proj", hidden, heads * hd, b), heads)
        )
        k = self._rotary(
            self._split_heads(g.linear(y, p + "self_attn.k_proj", hidden, kv * hd, b), kv)
        )
        v = self._split_heads(g.linear(y, p + "self_attn.v_proj", hidden, kv * hd, b), kv)
        k = g.op("Concat", past_k, k, axis=2)
        v = g.op("Concat", past_v, v, axis=2)
        g.output(k, f"present.{i}.key")
        g.output(v, f"present.{i}.value")
        scores = g.op(
            "Mul",
            g.op("MatMul", q, g.op("Transpose", self._shared(k), perm=[0, 1, 3, 2])),
            self.scale,
        )
        att = g.op(
            "MatMul", g.op("Softmax", g.op("Add", scores, self.bias), axis=-1), self._shared(v)
        )
        att = g.op("Reshape", g.op("Transpose", att, perm=[0, 2, 1, 3]), self.i64([0, 0, -1]))
        return g.linear(att, p + "self_attn.o_proj", heads * hd, hidden, False)

    def finish(self, x: Any, prefix: str, head: str) -> Any:
        """The final norm, the output layer, logits first among the outputs."""
        g = self.g
        x = self.rms_norm(x, prefix + "norm")
        g.output(g.linear(x, head, self.hidden, self.vocab, False), "logits")
        g.graph.outputs.insert(0, g.graph.outputs.pop())  # logits first
        return g.model()


def decoder_graph(cfg: Cfg, prefix: str = "model.language_model.", head: str = "lm_head") -> Any:
    """The decoder, weights under the checkpoint's names (text_config values)."""
    t = text_value(cfg)
    hidden, heads = int(t("hidden_size")), int(t("num_attention_heads"))
    inter = int(t("intermediate_size"))
    g = GraphBuilder("glm4v_decoder")
    # transformers' GLM-4 attention splits hidden_size over the heads (fields.py checks
    # head_dim); q, k and v always have biases.
    frame = DecoderFrame(g, cfg, hidden // heads, interleaved=True, qkv_bias=True)
    x = frame.x
    for i in range(frame.layers):
        p = f"{prefix}layers.{i}."
        att = frame.attention(frame.rms_norm(x, p + "input_layernorm"), i, p)
        x = g.op("Add", x, frame.rms_norm(att, p + "post_self_attn_layernorm"))
        y = frame.rms_norm(x, p + "post_attention_layernorm")
        gate_up = g.linear(y, p + "mlp.gate_up_proj", hidden, 2 * inter, False)
        gate, up = g.slice(gate_up, 0, inter, -1), g.slice(gate_up, inter, 2 * inter, -1)
        y = g.op("Mul", up, g.op("Mul", gate, g.op("Sigmoid", gate)))
        y = g.linear(y, p + "mlp.down_proj", inter, hidden, False)
        x = g.op("Add", x, frame.rms_norm(y, p + "post_mlp_layernorm"))
    return frame.finish(x, prefix, head)
