"""Gemma 3n's embedding and decoder graphs, op by op, for the runtime's gemma3 pipeline.

mobius 0.1 has a Gemma 3n text model, but it shares no KV cache between layers (its
`num_kv_shared_layers` layers compute their own keys and values) and takes the per-layer
inputs' token part from `input_ids`; so both graphs are ours, following transformers
5.25's Gemma3nModel and Gemma3nTextModel:

- embedding: text ids through `embed_tokens` × √hidden; ids in the vision range
  [vision vocab_offset, audio vocab_offset) and the audio range (≥ audio vocab_offset)
  through their Gemma3nMultimodalEmbedder (a small table, RMSNorm, Linear, RMSNorm without
  scale); the vision graph's rows written at the `<image_soft_token>` ids (only when
  pictures came); then the per-layer inputs, ([B, S, layers·width]): the token part
  (`embed_tokens_per_layer` × √width, ids outside its table as id 0) added to the
  projection of the finished embeddings (× hidden^-½, RMSNorm per layer), × 2^-½;
- decoder: AltUp's stack of `altup_num_inputs` streams (the embeddings and their
  projections scaled to the embeddings' magnitude); each layer predicts the streams,
  runs attention (q/k RMSNorm, v RMSNorm without scale, RoPE with its layer type's theta,
  scale 1, a sliding window on the sliding layers), the Laurel block, the MLP (with the
  Gaussian top-k on the layers `activation_sparsity_pattern` names), corrects the streams
  and adds the per-layer input's gated projection to all but the first; then the streams
  are unembedded, averaged, normed, and the tied table gives soft-capped logits.

KV cache: the first `num_hidden_layers - num_kv_shared_layers` layers own one each
(past_key_values.i, present.i); each later layer attends to the keys and values of the
last owning layer of its type, as transformers' `shared_kv_states` hands them over.
genai_config's `num_hidden_layers` counts the owning layers (the runtime's cache count).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg
from mmforge.backend.families.components.graph_builder import GraphBuilder

TEXT = "model.language_model."
VISION_EMBEDDER = "model.embed_vision."
AUDIO_EMBEDDER = "model.embed_audio."
HEAD = "lm_head.weight"
_VISION_OFFSET = 262_144
_AUDIO_OFFSET = 262_272
_MULTIMODAL_VOCAB = 128


def _i64(g: GraphBuilder, values: Any) -> Any:
    return g.const(np.array(values, dtype=np.int64))


def rms_norm(g: GraphBuilder, x: Any, name: str | None, size: int, eps: float) -> Any:
    """Gemma3nRMSNorm: x · (mean(x²) + eps)^-½, × weight (none: `with_scale=False`)."""
    mean = g.op("ReduceMean", g.op("Mul", x, x), _i64(g, [-1]), keepdims=1)
    inv = g.op("Pow", g.op("Add", mean, g.const(np.float32(eps))), g.const(np.float32(-0.5)))
    y = g.op("Mul", x, inv)
    return y if name is None else g.op("Mul", y, g.weight(name + ".weight", [size]))


class Text:
    """The text model's sizes, read from text_config (transformers' defaults)."""

    def __init__(self, cfg: Cfg):
        t = cfg.text
        self.hidden = int(t.get("hidden_size", 2048))
        self.heads = int(t.get("num_attention_heads", 8))
        self.kv = int(t.get("num_key_value_heads", 2))
        self.head_dim = int(t.get("head_dim", 256))
        self.layers = int(t.get("num_hidden_layers", 35))
        self.vocab = int(t.get("vocab_size", 262_400))
        self.eps = float(t.get("rms_norm_eps", 1e-6))
        self.per_layer = int(t.get("hidden_size_per_layer_input", 256))
        self.per_layer_vocab = int(t.get("vocab_size_per_layer_input", 262_144))
        self.altup = int(t.get("altup_num_inputs", 4))
        self.active = int(t.get("altup_active_idx", 0))
        self.correct_scale = bool(t.get("altup_correct_scale", True))
        self.laurel = int(t.get("laurel_rank", 64))
        self.shared = int(t.get("num_kv_shared_layers", 15))
        self.window = int(t.get("sliding_window", 512))
        cap = t.get("final_logit_softcapping", 30.0)
        self.softcap = None if cap is None else float(cap)
        act = str(t.get("hidden_activation", "gelu_pytorch_tanh"))
        if act not in ("gelu_pytorch_tanh", "gelu_new", "gelu_fast"):
            raise MmforgeError(
                f"Gemma 3n's hidden_activation {act} is not supported",
                "Gemma 3n releases use gelu_pytorch_tanh; other activations are not converted",
            )
        ff = t.get("intermediate_size", 16_384)
        self.ff = [int(v) for v in ff] if isinstance(ff, list) else [int(ff)] * self.layers
        kinds = t.get("layer_types")
        self.kinds = (
            [str(k) for k in kinds]
            if kinds
            else [
                "full_attention" if (i + 1) % 5 == 0 else "sliding_attention"
                for i in range(self.layers)
            ]
        )
        sparsity = t.get("activation_sparsity_pattern")
        if sparsity is None:
            sparse = 10 if self.layers > 10 else 0
            sparsity = [0.95] * sparse + [0.0] * (self.layers - sparse)
        elif not isinstance(sparsity, list):
            sparsity = [float(sparsity)] * self.layers
        self.sparsity = [float(v) for v in sparsity]
        if len(self.ff) != self.layers or len(self.kinds) != self.layers:
            raise MmforgeError(
                "Gemma 3n's intermediate_size or layer_types does not list every layer",
                "The checkpoint's config.json is inconsistent",
            )
        self.theta = {
            "full_attention": float(
                t.get("rope_parameters.full_attention.rope_theta", t.get("rope_theta", 1e6))
            ),
            "sliding_attention": float(
                t.get(
                    "rope_parameters.sliding_attention.rope_theta",
                    t.get("rope_local_base_freq", 1e4),
                )
            ),
        }
        self.first_shared = self.layers - self.shared if self.shared else self.layers
        # The last owning layer of each type keeps its keys and values for the shared ones.
        owners = {kind: i for i, kind in enumerate(self.kinds[: self.first_shared])}
        orphans = sorted(set(self.kinds[self.first_shared :]) - set(owners))
        if self.first_shared < 1 or orphans:
            raise MmforgeError(
                f"Gemma 3n's last {self.shared} layers share KV caches that no earlier layer "
                f"of their kind ({', '.join(orphans) or 'any'}) holds",
                "The checkpoint's config.json is inconsistent (num_kv_shared_layers, layer_types)",
            )
        self.source = {kind: owners[kind] for kind in set(self.kinds[self.first_shared :])}
        vision = cfg.sub("vision_config")
        audio = cfg.sub("audio_config")
        self.vision_offset = int(vision.get("vocab_offset", _VISION_OFFSET))
        self.vision_vocab = int(vision.get("vocab_size", _MULTIMODAL_VOCAB))
        self.vision_width = int(vision.get("hidden_size", 2048))
        self.vision_eps = float(vision.get("rms_norm_eps", 1e-6))
        self.audio_offset = int(audio.get("vocab_offset", _AUDIO_OFFSET))
        self.audio_vocab = int(audio.get("vocab_size", _MULTIMODAL_VOCAB))
        self.audio_width = int(audio.get("hidden_size", 1536))
        self.audio_eps = float(audio.get("rms_norm_eps", 1e-6))
        self.image_token = int(cfg.get("image_token_id", 262_145))


def _hard_embeddings(
    g: GraphBuilder, ids: Any, prefix: str, offset: int, vocab: int, width: int, t: Text, eps: float
) -> tuple[Any, Any]:
    """Gemma3nMultimodalEmbedder on ids: (in its range [B, S], their embeddings [B, S, H])."""
    inside = g.op("GreaterOrEqual", ids, g.const(np.int64(offset)))
    # ids past the range keep the table's last row (transformers' dummy token)
    local = g.op("Where", inside, ids, g.const(np.int64(offset + vocab - 1)))
    local = g.op(
        "Sub", g.op("Min", local, g.const(np.int64(offset + vocab - 1))), g.const(np.int64(offset))
    )
    rows = g.op("Gather", g.weight(prefix + "embedding.weight", [vocab, width]), local, axis=0)
    rows = rms_norm(g, rows, prefix + "hard_embedding_norm", width, eps)
    rows = g.linear(rows, prefix + "embedding_projection", width, t.hidden, bias=False)
    return inside, rms_norm(g, rows, None, t.hidden, eps)


def embedding_graph(cfg: Cfg) -> Any:
    """input_ids [B, S] and image_features [N, 256, H] → inputs_embeds, per_layer_inputs."""
    import onnx_ir as ir

    t = Text(cfg)
    g = GraphBuilder("gemma3n_embedding")
    ids = g.input("input_ids", ir.DataType.INT64, ["batch_size", "sequence_length"])
    # No declared rank: [N, 256, H] with pictures, an empty tensor on later steps.
    features = ir.Value(name="image_features", type=ir.TensorType(ir.DataType.FLOAT))
    g.graph.inputs.append(features)

    table = g.weight(TEXT + "embed_tokens.weight", [t.vocab, t.hidden])
    embeds = g.op("Gather", table, ids, axis=0)
    embeds = g.op("Mul", embeds, g.const(np.float32(t.hidden**0.5)))
    in_vision, vision = _hard_embeddings(
        g, ids, VISION_EMBEDDER, t.vision_offset, t.vision_vocab, t.vision_width, t, t.vision_eps
    )
    in_audio, audio = _hard_embeddings(
        g, ids, AUDIO_EMBEDDER, t.audio_offset, t.audio_vocab, t.audio_width, t, t.audio_eps
    )
    vision_only = g.op("And", in_vision, g.op("Not", in_audio))
    embeds = g.op("Where", g.op("Unsqueeze", vision_only, _i64(g, [-1])), vision, embeds)
    embeds = g.op("Where", g.op("Unsqueeze", in_audio, _i64(g, [-1])), audio, embeds)
    rows = g.op("Reshape", features, _i64(g, [-1, t.hidden]))
    has_features = g.op("Greater", g.op("Size", features), g.const(np.int64(0)))
    slots = g.op("And", g.op("Equal", ids, g.const(np.int64(t.image_token))), has_features)
    where = g.op("Transpose", g.op("NonZero", slots), perm=[1, 0])  # [M, 2]
    embeds = g.op("ScatterND", embeds, where, rows)
    g.output(embeds, "inputs_embeds")

    width = t.layers * t.per_layer
    in_table = g.op(
        "And",
        g.op("GreaterOrEqual", ids, g.const(np.int64(0))),
        g.op("Less", ids, g.const(np.int64(t.per_layer_vocab))),
    )
    token_ids = g.op("Where", in_table, ids, g.const(np.int64(0)))
    per_table = g.weight(TEXT + "embed_tokens_per_layer.weight", [t.per_layer_vocab, width])
    tokens = g.op(
        "Mul", g.op("Gather", per_table, token_ids, axis=0), g.const(np.float32(t.per_layer**0.5))
    )
    projected = g.linear(embeds, TEXT + "per_layer_model_projection", t.hidden, width, bias=False)
    projected = g.op("Mul", projected, g.const(np.float32(t.hidden**-0.5)))
    projected = g.op("Reshape", projected, _i64(g, [0, 0, t.layers, t.per_layer]))
    projected = rms_norm(g, projected, TEXT + "per_layer_projection_norm", t.per_layer, t.eps)
    tokens = g.op("Reshape", tokens, _i64(g, [0, 0, t.layers, t.per_layer]))
    combined = g.op("Mul", g.op("Add", projected, tokens), g.const(np.float32(2.0**-0.5)))
    g.output(g.op("Reshape", combined, _i64(g, [0, 0, width])), "per_layer_inputs")
    return g.model()


def _gelu(g: GraphBuilder, x: Any) -> Any:
    return g.gelu(x, tanh=True)


def _magnitude(g: GraphBuilder, x: Any) -> Any:
    return g.op("Sqrt", g.op("ReduceMean", g.op("Mul", x, x), _i64(g, [-1]), keepdims=1))


def _rescaled(g: GraphBuilder, x: Any, target: Any) -> Any:
    """X scaled to the target magnitude (its own clamped at 1e-5 before the root)."""
    mean = g.op("ReduceMean", g.op("Mul", x, x), _i64(g, [-1]), keepdims=1)
    own = g.op("Sqrt", g.op("Max", mean, g.const(np.float32(1e-5))))
    return g.op("Div", g.op("Mul", x, target), own)


def std_multiplier(sparsity: float) -> float:
    """The standard normal's quantile at `sparsity`, in float32 as transformers takes it."""
    import torch

    normal = torch.distributions.normal.Normal(0, 1)
    return float(normal.icdf(torch.tensor(sparsity, dtype=torch.float32)))


def decoder_graph(cfg: Cfg, tied: bool) -> Any:
    """Gemma 3n's text model with its LM head: embeddings and per-layer inputs to logits.

    Inputs: inputs_embeds [B, S, H], per_layer_inputs [B, S, layers·width], attention_mask
    [B, P + S], position_ids [B, S], past_key_values.i.key/value [B, kv, P, d] for each
    layer that owns a cache. Outputs: logits, present.i.key/value [B, kv, P + S, d].
    """
    import onnx_ir as ir

    t = Text(cfg)
    g = GraphBuilder("gemma3n_decoder")
    f32, i64 = ir.DataType.FLOAT, ir.DataType.INT64
    x = g.input("inputs_embeds", f32, ["batch_size", "sequence_length", t.hidden])
    per_layer = g.input(
        "per_layer_inputs", f32, ["batch_size", "sequence_length", t.layers * t.per_layer]
    )
    mask = g.input("attention_mask", i64, ["batch_size", "total_sequence_length"])
    positions = g.input("position_ids", i64, ["batch_size", "sequence_length"])
    cache = ["batch_size", t.kv, "past_sequence_length", t.head_dim]
    pasts = [
        (
            g.input(f"past_key_values.{i}.key", f32, cache),
            g.input(f"past_key_values.{i}.value", f32, cache),
        )
        for i in range(t.first_shared)
    ]

    # Rotary tables per layer type: [B, 1, S, d].
    d, half = t.head_dim, t.head_dim // 2
    pos = g.op("Unsqueeze", g.op("Cast", positions, to=f32), _i64(g, [-1]))
    tables: dict[str, tuple[Any, Any]] = {}
    for kind in sorted(set(t.kinds)):
        inv_freq = 1.0 / (
            t.theta[kind] ** (np.arange(0, d, 2, dtype=np.int64).astype(np.float32) / d)
        )
        freqs = g.op("Mul", pos, g.const(inv_freq.astype(np.float32)))
        angles = g.op("Concat", freqs, freqs, axis=-1)
        tables[kind] = (
            g.op("Unsqueeze", g.op("Cos", angles), _i64(g, [1])),
            g.op("Unsqueeze", g.op("Sin", angles), _i64(g, [1])),
        )

    def rotate(v: Any, kind: str) -> Any:
        cos, sin = tables[kind]
        first, second = g.slice(v, 0, half, axis=3), g.slice(v, half, d, axis=3)
        rotated = g.op("Concat", g.op("Neg", second), first, axis=3)
        return g.op("Add", g.op("Mul", v, cos), g.op("Mul", rotated, sin))

    # Masks: key k for query q when not padding and k <= past + q (and, sliding, within
    # the window: k > past + q - window).
    seq = g.op("Shape", x, start=1, end=2)
    total = g.op("Shape", mask, start=1, end=2)
    past = g.op("Sub", total, seq)
    zero, one = g.const(np.int64(0)), g.const(np.int64(1))
    q_pos = g.op("Add", g.op("Range", zero, g.op("Squeeze", seq), one), g.op("Squeeze", past))
    k_pos = g.op("Range", zero, g.op("Squeeze", total), one)
    keys = g.op("Unsqueeze", k_pos, _i64(g, [0]))
    queries = g.op("Unsqueeze", q_pos, _i64(g, [1]))
    causal = g.op("LessOrEqual", keys, queries)  # [S, T]
    near = g.op("Greater", keys, g.op("Sub", queries, g.const(np.int64(t.window))))
    keep = g.op("Cast", g.op("Unsqueeze", mask, _i64(g, [1, 2])), to=ir.DataType.BOOL)
    lowest = g.const(np.float32(np.finfo(np.float32).min))
    nothing = g.const(np.float32(0.0))
    masks = {
        "full_attention": g.op("Where", g.op("And", causal, keep), nothing, lowest),
        "sliding_attention": g.op(
            "Where", g.op("And", g.op("And", causal, near), keep), nothing, lowest
        ),
    }

    def split(v: Any, n: int) -> Any:
        return g.op("Reshape", v, _i64(g, [0, 0, n, d]))  # [B, S, n, d]

    def heads_first(v: Any) -> Any:
        return g.op("Transpose", v, perm=[0, 2, 1, 3])

    def repeat(v: Any) -> Any:
        if t.kv == t.heads:
            return v
        b = g.op("Unsqueeze", v, _i64(g, [2]))  # [B, kv, 1, T, d]
        shape = g.op(
            "Concat",
            g.op("Shape", v, start=0, end=2),
            _i64(g, [t.heads // t.kv]),
            g.op("Shape", v, start=2, end=4),
            axis=0,
        )
        return g.op("Reshape", g.op("Expand", b, shape), _i64(g, [0, t.heads, -1, d]))

    # AltUp's streams, [B, S, A, H]: the embeddings, then their projections rescaled.
    target = _magnitude(g, x)
    streams = [x]
    for i in range(1, t.altup):
        p = g.linear(x, f"{TEXT}altup_projections.{i - 1}", t.hidden, t.hidden, bias=False)
        streams.append(_rescaled(g, p, target))
    state = g.op("Concat", *[g.op("Unsqueeze", s, _i64(g, [2])) for s in streams], axis=2)
    later = np.ones((1, 1, t.altup, 1), dtype=np.float32)
    later[0, 0, 0, 0] = 0.0  # the gated per-layer input goes to streams 1 … A-1

    def router(v: Any, p: str) -> Any:
        r = rms_norm(g, v, p + "altup.router_norm", t.hidden, t.eps)
        r = g.op("Mul", r, g.const(np.float32(t.hidden**-1.0)))
        return g.op("Tanh", g.linear(r, p + "altup.modality_router", t.hidden, t.altup, bias=False))

    kv_states: dict[int, tuple[Any, Any]] = {}
    for i in range(t.layers):
        p = f"{TEXT}layers.{i}."
        kind = t.kinds[i]
        # AltUp predict: stream k + Σ_m coef[k, m] · stream m
        active_in = g.op("Gather", state, _i64(g, t.active), axis=2)
        coefs = g.linear(
            router(active_in, p), p + "altup.prediction_coefs", t.altup, t.altup**2, bias=False
        )
        coefs = g.op("Reshape", coefs, _i64(g, [0, 0, t.altup, t.altup]))
        predictions = g.op("Add", g.op("MatMul", coefs, state), state)
        active = g.op("Gather", predictions, _i64(g, t.active), axis=2)
        normed = rms_norm(g, active, p + "input_layernorm", t.hidden, t.eps)

        # Laurel
        lr = g.linear(normed, p + "laurel.linear_left", t.hidden, t.laurel, bias=False)
        lr = g.linear(lr, p + "laurel.linear_right", t.laurel, t.hidden, bias=False)
        laurel = g.op(
            "Add", normed, rms_norm(g, lr, p + "laurel.post_laurel_norm", t.hidden, t.eps)
        )

        # Attention
        q = split(
            g.linear(normed, p + "self_attn.q_proj", t.hidden, t.heads * d, bias=False), t.heads
        )
        q = rotate(heads_first(rms_norm(g, q, p + "self_attn.q_norm", d, t.eps)), kind)
        if i < t.first_shared:
            k = split(
                g.linear(normed, p + "self_attn.k_proj", t.hidden, t.kv * d, bias=False), t.kv
            )
            k = rotate(heads_first(rms_norm(g, k, p + "self_attn.k_norm", d, t.eps)), kind)
            v = split(
                g.linear(normed, p + "self_attn.v_proj", t.hidden, t.kv * d, bias=False), t.kv
            )
            v = heads_first(rms_norm(g, v, None, d, t.eps))
            k = g.op("Concat", pasts[i][0], k, axis=2)
            v = g.op("Concat", pasts[i][1], v, axis=2)
            g.output(g.op("Identity", k), f"present.{i}.key")
            g.output(g.op("Identity", v), f"present.{i}.value")
            kv_states[i] = (k, v)
        else:
            k, v = kv_states[t.source[kind]]
        scores = g.op("MatMul", q, g.op("Transpose", repeat(k), perm=[0, 1, 3, 2]))
        scores = g.op("Add", scores, masks[kind])
        ctx = g.op("MatMul", g.op("Softmax", scores, axis=-1), repeat(v))
        ctx = g.op(
            "Reshape", g.op("Transpose", ctx, perm=[0, 2, 1, 3]), _i64(g, [0, 0, t.heads * d])
        )
        attn = g.linear(ctx, p + "self_attn.o_proj", t.heads * d, t.hidden, bias=False)
        attn = rms_norm(g, attn, p + "post_attention_layernorm", t.hidden, t.eps)
        mixed = g.op(
            "Mul",
            g.op("Add", g.op("Add", active, attn), laurel),
            g.const(np.float32(2.0**-0.5)),
        )

        # MLP
        h = rms_norm(g, mixed, p + "pre_feedforward_layernorm", t.hidden, t.eps)
        ff = t.ff[i]
        gate = g.linear(h, p + "mlp.gate_proj", t.hidden, ff, bias=False)
        if t.sparsity[i] > 0.0:
            mean = g.op("ReduceMean", gate, _i64(g, [-1]), keepdims=1)
            centred = g.op("Sub", gate, mean)
            std = g.op(
                "Sqrt", g.op("ReduceMean", g.op("Mul", centred, centred), _i64(g, [-1]), keepdims=1)
            )
            cutoff = g.op(
                "Add", mean, g.op("Mul", std, g.const(np.float32(std_multiplier(t.sparsity[i]))))
            )
            gate = g.op("Relu", g.op("Sub", gate, cutoff))
        up = g.linear(h, p + "mlp.up_proj", t.hidden, ff, bias=False)
        mlp = g.linear(
            g.op("Mul", _gelu(g, gate), up), p + "mlp.down_proj", ff, t.hidden, bias=False
        )
        mlp = rms_norm(g, mlp, p + "post_feedforward_layernorm", t.hidden, t.eps)
        out = g.op("Add", mixed, mlp)

        # AltUp correct: prediction k + innovation · (coef_k + 1)
        innovation = g.op("Sub", out, active)
        correction = g.linear(
            router(out, p), p + "altup.correction_coefs", t.altup, t.altup, bias=False
        )
        correction = g.op("Add", correction, g.const(np.float32(1.0)))
        state = g.op(
            "Add",
            g.op(
                "Mul",
                g.op("Unsqueeze", innovation, _i64(g, [2])),
                g.op("Unsqueeze", correction, _i64(g, [-1])),
            ),
            predictions,
        )
        first = g.op("Gather", state, _i64(g, t.active), axis=2)
        if t.correct_scale:
            first = g.op("Mul", first, g.weight(p + "altup.correct_output_scale", [t.hidden]))
        gated = _gelu(
            g, g.linear(first, p + "per_layer_input_gate", t.hidden, t.per_layer, bias=False)
        )
        gated = g.op("Mul", gated, g.slice(per_layer, i * t.per_layer, (i + 1) * t.per_layer, 2))
        gated = g.linear(gated, p + "per_layer_projection", t.per_layer, t.hidden, bias=False)
        gated = rms_norm(g, gated, p + "post_per_layer_input_norm", t.hidden, t.eps)
        state = g.op(
            "Add", state, g.op("Mul", g.op("Unsqueeze", gated, _i64(g, [2])), g.const(later))
        )

    # Unembed the streams to the first one's magnitude, average, norm.
    first = g.op("Gather", state, _i64(g, 0), axis=2)
    target = _magnitude(g, first)
    outs = [first]
    for i in range(1, t.altup):
        s = g.op("Gather", state, _i64(g, i), axis=2)
        u = g.linear(s, f"{TEXT}altup_unembed_projections.{i - 1}", t.hidden, t.hidden, bias=False)
        outs.append(_rescaled(g, u, target))
    stacked = g.op("Concat", *[g.op("Unsqueeze", o, _i64(g, [0])) for o in outs], axis=0)
    h = rms_norm(
        g, g.op("ReduceMean", stacked, _i64(g, [0]), keepdims=0), TEXT + "norm", t.hidden, t.eps
    )
    head = g.weight(TEXT + "embed_tokens.weight" if tied else HEAD, [t.vocab, t.hidden])
    logits = g.op("MatMul", h, g.op("Transpose", head, perm=[1, 0]))
    if t.softcap is not None:
        c = g.const(np.float32(t.softcap))
        logits = g.op("Mul", g.op("Tanh", g.op("Div", logits, c)), c)
    g.output(logits, "logits")
    g.graph.outputs.insert(0, g.graph.outputs.pop())  # logits first, then the cache
    return g.model()
