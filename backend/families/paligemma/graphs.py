"""PaliGemma's three graphs, written op by op (mobius 0.1 builds PaliGemma as a LLaVA).

mobius registers `paligemma` with its LLaVA model: a two-layer MLP projector where
PaliGemma has one Linear, a Llama decoder where PaliGemma has Gemma's (RMSNorm scaled by
1 + weight, GeGLU, embeddings scaled by √hidden), causal attention where PaliGemma lets
the whole prompt attend both ways, and 0-based positions where PaliGemma's are 1-based
(RoPE sees only position differences, so that last one changes rounding alone; the
decoder counts from 1 as transformers does, so both sides round alike).
So the graphs are ours, following transformers 5.24's PaliGemmaModel:

- vision: SigLIP (`SiglipVisionModel.last_hidden_state`, no pooling head; its encoder:
  components/towers/siglip.py) and the projector's Linear, for every picture the
  runtime stacks;
- embedding: token embeddings × √hidden (`GemmaTextScaledWordEmbedding`), the projected
  image features written unscaled at the picture's ids (`masked_scatter`);
- decoder: Gemma with positions + 1 and, while the KV cache is empty (the prefill), every
  prompt position attending to every other (`token_type_ids` 0 for the whole prefix in
  `PaliGemmaProcessor`; `block_sequence_ids` in `create_masks_for_generate`); each later
  step is causal.

Initializers carry the checkpoint's tensor names in one layout (`canonical_name`), so the
weights go through the common path (convert/weights.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg, as_int
from mmforge.backend.families.components.graph_builder import GraphBuilder
from mmforge.backend.families.components.towers.siglip import siglip_encoder

VISION = "vision_tower."
PROJECTOR = "multi_modal_projector.linear"
TEXT = "language_model.model."
HEAD = "language_model.lm_head.weight"


def canonical_name(name: str) -> str:
    """A checkpoint tensor's name in the layout the graphs use.

    Hub checkpoints (transformers 4) write `vision_tower.vision_model.…`,
    `language_model.model.…` and `language_model.lm_head.…`; transformers 5 saves the
    tower without `vision_model.`, and its own module paths are `model.vision_tower.…`,
    `model.language_model.…`, `model.multi_modal_projector.…` and `lm_head.…`.
    """
    if name.startswith("model.language_model."):
        name = TEXT + name[len("model.language_model.") :]
    elif name.startswith("model."):
        name = name[len("model.") :]
    elif name.startswith("lm_head."):
        name = "language_model." + name
    if name.startswith(VISION + "vision_model."):
        name = VISION + name[len(VISION + "vision_model.") :]
    return name


def _activation(g: GraphBuilder, x: Any, act: str, where: str) -> Any:
    if act in ("gelu_pytorch_tanh", "gelu_new", "gelu_fast"):
        return g.gelu(x, tanh=True)
    if act == "gelu":
        return g.gelu(x, tanh=False)
    raise MmforgeError(
        f"{where} activation {act} is not supported",
        "PaliGemma releases use gelu_pytorch_tanh; other activations are not converted",
    )


def image_tokens(cfg: Cfg) -> int:
    """Ids per picture: the SigLIP patch grid, (image_size / patch_size)²."""
    v = cfg.sub("vision_config")
    return (as_int(v.get("image_size", 224)) // as_int(v.get("patch_size", 14))) ** 2


def vision_graph(cfg: Cfg) -> Any:
    """SigLIP and the projector: pixel_values [..., 3, S, S] -> image_features [N·K, H]."""
    import onnx_ir as ir

    v = cfg.sub("vision_config")
    hidden = int(v.get("hidden_size", 768))
    heads = int(v.get("num_attention_heads", 12))
    ff = int(v.get("intermediate_size", 3072))
    layers = int(v.get("num_hidden_layers", 12))
    eps = float(v.get("layer_norm_eps", 1e-6))
    patch = as_int(v.get("patch_size", 14))
    size = as_int(v.get("image_size", 224))
    channels = int(v.get("num_channels", 3))
    act = str(v.get("hidden_act", "gelu_pytorch_tanh"))
    text_hidden = int(cfg.text.get("hidden_size"))
    projection = int(v.get("projection_dim", cfg.get("projection_dim", text_hidden)))
    grid = size // patch

    g = GraphBuilder("paligemma_vision")
    f32 = ir.DataType.FLOAT
    # The runtime's videochat_flash_qwen processor stacks pictures as [1, N, 3, S, S].
    pixels = g.input("pixel_values", f32, ["batch", "num_images", channels, size, size])
    x = g.op("Reshape", pixels, g.const(np.array([-1, channels, size, size])))
    emb = VISION + "embeddings."
    x = g.op(
        "Conv",
        x,
        g.weight(emb + "patch_embedding.weight", [hidden, channels, patch, patch]),
        g.weight(emb + "patch_embedding.bias", [hidden]),
        strides=[patch, patch],
        kernel_shape=[patch, patch],
    )  # [N, D, g, g]
    x = g.op("Reshape", x, g.const(np.array([0, hidden, grid * grid])))
    x = g.op("Transpose", x, perm=[0, 2, 1])
    x = g.op("Add", x, g.weight(emb + "position_embedding.weight", [grid * grid, hidden]))

    x = siglip_encoder(
        g, x, VISION, layers, hidden, heads, ff, eps, lambda h: _activation(g, h, act, "Vision")
    )
    y = g.linear(x, PROJECTOR, hidden, projection)
    g.output(g.op("Reshape", y, g.const(np.array([-1, projection]))), "image_features")
    return g.model()


def embedding_graph(cfg: Cfg) -> Any:
    """Token embeddings × √hidden, the image features at the picture's ids.

    Placeholders keep their text embedding when no features
    come with them (decode steps), as in transformers, which replaces them only when
    pixels are given. An image token id past the vocabulary embeds as id 0 (transformers
    replaces it by 0 before the lookup).
    """
    import onnx_ir as ir

    text = cfg.text
    vocab, hidden = int(text.get("vocab_size")), int(text.get("hidden_size"))
    image = int(cfg.first("image_token_index", "image_token_id"))
    g = GraphBuilder("paligemma_embedding")
    ids = g.input("input_ids", ir.DataType.INT64, ["batch_size", "sequence_length"])
    # No declared rank: [N·K, H] with pictures, an empty tensor on decode steps.
    features = ir.Value(name="image_features", type=ir.TensorType(ir.DataType.FLOAT))
    g.graph.inputs.append(features)
    is_image = g.op("Equal", ids, g.const(np.int64(image)))
    looked_up = g.op(
        "Where", g.op("Less", ids, g.const(np.int64(vocab))), ids, g.const(np.int64(0))
    )
    table = g.weight(TEXT + "embed_tokens.weight", [vocab, hidden])
    embeds = g.op("Gather", table, looked_up, axis=0)
    # GemmaTextScaledWordEmbedding: × hidden**0.5 as a tensor of the weights' dtype.
    embeds = g.op("Mul", embeds, g.const(np.float32(hidden**0.5)))
    rows = g.op("Reshape", features, g.const(np.array([-1, hidden])))
    has_features = g.op("Greater", g.op("Size", features), g.const(np.int64(0)))
    slots = g.op("And", is_image, has_features)
    where = g.op("Transpose", g.op("NonZero", slots), perm=[1, 0])  # [M, 2]
    g.output(g.op("ScatterND", embeds, where, rows), "inputs_embeds")
    return g.model()


def _rms_norm(g: GraphBuilder, x: Any, name: str, size: int, eps: float) -> Any:
    """Gemma's RMSNorm: x / √(mean(x²) + eps) × (1 + weight)."""
    mean = g.op("ReduceMean", g.op("Mul", x, x), g.const(np.array([-1])), keepdims=1)
    normed = g.op("Div", x, g.op("Sqrt", g.op("Add", mean, g.const(np.float32(eps)))))
    scale = g.op("Add", g.weight(name, [size]), g.const(np.float32(1.0)))
    return g.op("Mul", normed, scale)


def decoder_graph(cfg: Cfg, tied: bool) -> Any:
    """Gemma or Gemma 2 with PaliGemma's positions and prefix mask: embeddings to logits.

    Gemma for PaliGemma, Gemma 2 for PaliGemma 2.

    Inputs: inputs_embeds [B, S, H], attention_mask [B, P + S], position_ids [B, S] (the
    runtime's 0-based positions), past_key_values.i.key/value [B, kv, P, d]. Outputs:
    logits and present.i.key/value [B, kv, P + S, d].

    Gemma 2 (transformers 5.24, Gemma2DecoderLayer) adds: a norm after attention and one
    on each side of the MLP, attention scores scaled by query_pre_attn_scalar⁻½ and
    soft-capped (tanh(x / c)·c) before the mask, soft-capped logits, and a sliding window
    on the layers `layer_types` names so. The window bounds the causal part only: at the
    prefill the prompt is one block (`block_sequence_ids` 0), which
    `create_sliding_window_causal_mask` ORs over the window, so it attends whole.
    """
    import onnx_ir as ir

    text = cfg.text
    hidden = int(text.get("hidden_size"))
    heads = int(text.get("num_attention_heads"))
    kv = int(text.get("num_key_value_heads", heads))
    head_dim = int(text.get("head_dim") or hidden // heads)
    ff = int(text.get("intermediate_size"))
    layers = int(text.get("num_hidden_layers"))
    vocab = int(text.get("vocab_size"))
    eps = float(text.get("rms_norm_eps", 1e-6))
    theta = float(text.get("rope_parameters.rope_theta", text.get("rope_theta", 10000.0)))
    bias = bool(text.get("attention_bias", False))
    gemma2 = text.get("model_type") == "gemma2"
    # GemmaMLP reads hidden_act, Gemma2MLP hidden_activation (transformers 5.24).
    act = str(text.get("hidden_activation" if gemma2 else "hidden_act", "gelu_pytorch_tanh"))
    attn_cap = text.get("attn_logit_softcapping") if gemma2 else None
    final_cap = text.get("final_logit_softcapping") if gemma2 else None
    window = text.get("sliding_window") if gemma2 else None
    kinds = list(text.get("layer_types") or []) if gemma2 else []

    g = GraphBuilder("paligemma_decoder")
    f32, i64 = ir.DataType.FLOAT, ir.DataType.INT64
    x = g.input("inputs_embeds", f32, ["batch_size", "sequence_length", hidden])
    mask = g.input("attention_mask", i64, ["batch_size", "total_sequence_length"])
    positions = g.input("position_ids", i64, ["batch_size", "sequence_length"])
    cache = ["batch_size", kv, "past_sequence_length", head_dim]
    pasts = [
        (
            g.input(f"past_key_values.{i}.key", f32, cache),
            g.input(f"past_key_values.{i}.value", f32, cache),
        )
        for i in range(layers)
    ]

    # Rotary tables for positions + 1 (PaliGemma counts from 1).
    inv_freq = 1.0 / (
        theta ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / head_dim)
    )
    pos = g.op("Cast", g.op("Add", positions, g.const(np.int64(1))), to=f32)
    freqs = g.op(
        "Mul", g.op("Unsqueeze", pos, g.const(np.array([-1]))), g.const(inv_freq.astype(np.float32))
    )
    angles = g.op("Concat", freqs, freqs, axis=-1)  # [B, S, d]
    cos = g.op("Unsqueeze", g.op("Cos", angles), g.const(np.array([1])))  # [B, 1, S, d]
    sin = g.op("Unsqueeze", g.op("Sin", angles), g.const(np.array([1])))
    half = head_dim // 2

    def rotate(t: Any) -> Any:
        first = g.slice(t, 0, half, axis=3)
        second = g.slice(t, half, head_dim, axis=3)
        rotated = g.op("Concat", g.op("Neg", second), first, axis=3)
        return g.op("Add", g.op("Mul", t, cos), g.op("Mul", rotated, sin))

    # The mask: key k is allowed for query q when it is not padding and either the cache
    # was empty (the prefill: the prompt attends both ways) or k <= past + q (causal).
    seq = g.op("Shape", x, start=1, end=2)
    total = g.op("Shape", mask, start=1, end=2)
    past = g.op("Sub", total, seq)
    zero = g.const(np.int64(0))
    one = g.const(np.int64(1))
    q_pos = g.op("Add", g.op("Range", zero, g.op("Squeeze", seq), one), g.op("Squeeze", past))
    k_pos = g.op("Range", zero, g.op("Squeeze", total), one)
    causal = g.op(
        "LessOrEqual",
        g.op("Unsqueeze", k_pos, g.const(np.array([0]))),
        g.op("Unsqueeze", q_pos, g.const(np.array([1]))),
    )  # [S, T]
    prefill = g.op("Equal", g.op("Squeeze", past), zero)
    allowed = g.op("Or", causal, prefill)
    keep = g.op("Cast", g.op("Unsqueeze", mask, g.const(np.array([1, 2]))), to=ir.DataType.BOOL)
    allowed = g.op("And", allowed, keep)  # [B, 1, S, T]
    lowest = np.float32(np.finfo(np.float32).min)
    bias_mask = g.op("Where", allowed, g.const(np.float32(0.0)), g.const(lowest))
    sliding_mask = bias_mask
    if window is not None and "sliding_attention" in kinds:
        # transformers' sliding_window_overlay: key k is in the window of query q when
        # k > q - window; the prefill's block overlay is ORed over it.
        near = g.op(
            "Greater",
            g.op("Unsqueeze", k_pos, g.const(np.array([0]))),
            g.op(
                "Sub",
                g.op("Unsqueeze", q_pos, g.const(np.array([1]))),
                g.const(np.int64(int(window))),
            ),
        )
        in_window = g.op("Or", g.op("And", causal, near), prefill)
        sliding_mask = g.op(
            "Where", g.op("And", in_window, keep), g.const(np.float32(0.0)), g.const(lowest)
        )

    def cap(t: Any, value: Any) -> Any:
        if value is None:
            return t
        c = g.const(np.float32(float(value)))
        return g.op("Mul", g.op("Tanh", g.op("Div", t, c)), c)

    def split(t: Any, n: int) -> Any:
        shaped = g.op("Reshape", t, g.const(np.array([0, 0, n, head_dim])))
        return g.op("Transpose", shaped, perm=[0, 2, 1, 3])

    def repeat(t: Any) -> Any:
        if kv == heads:
            return t
        b = g.op("Unsqueeze", t, g.const(np.array([2])))  # [B, kv, 1, T, d]
        shape = g.op(
            "Concat",
            g.op("Shape", t, start=0, end=2),
            g.const(np.array([heads // kv])),
            g.op("Shape", t, start=2, end=4),
            axis=0,
        )
        return g.op(
            "Reshape", g.op("Expand", b, shape), g.const(np.array([0, heads, -1, head_dim]))
        )

    scaling = float(text.get("query_pre_attn_scalar") or head_dim) ** -0.5
    for i in range(layers):
        p = f"{TEXT}layers.{i}."
        h = _rms_norm(g, x, p + "input_layernorm.weight", hidden, eps)
        q = rotate(
            split(g.linear(h, p + "self_attn.q_proj", hidden, heads * head_dim, bias), heads)
        )
        k = rotate(split(g.linear(h, p + "self_attn.k_proj", hidden, kv * head_dim, bias), kv))
        v = split(g.linear(h, p + "self_attn.v_proj", hidden, kv * head_dim, bias), kv)
        k = g.op("Concat", pasts[i][0], k, axis=2)
        v = g.op("Concat", pasts[i][1], v, axis=2)
        g.output(g.op("Identity", k), f"present.{i}.key")
        g.output(g.op("Identity", v), f"present.{i}.value")
        scores = g.op("MatMul", q, g.op("Transpose", repeat(k), perm=[0, 1, 3, 2]))
        scores = cap(g.op("Mul", scores, g.const(np.float32(scaling))), attn_cap)
        sliding = i < len(kinds) and kinds[i] == "sliding_attention"
        scores = g.op("Add", scores, sliding_mask if sliding else bias_mask)
        ctx = g.op("MatMul", g.op("Softmax", scores, axis=-1), repeat(v))
        ctx = g.op(
            "Reshape",
            g.op("Transpose", ctx, perm=[0, 2, 1, 3]),
            g.const(np.array([0, 0, heads * head_dim])),
        )
        attn = g.linear(ctx, p + "self_attn.o_proj", heads * head_dim, hidden, bias)
        if gemma2:
            attn = _rms_norm(g, attn, p + "post_attention_layernorm.weight", hidden, eps)
            x = g.op("Add", x, attn)
            h = _rms_norm(g, x, p + "pre_feedforward_layernorm.weight", hidden, eps)
        else:
            x = g.op("Add", x, attn)
            h = _rms_norm(g, x, p + "post_attention_layernorm.weight", hidden, eps)
        gate = _activation(g, g.linear(h, p + "mlp.gate_proj", hidden, ff, False), act, "Text")
        up = g.linear(h, p + "mlp.up_proj", hidden, ff, False)
        mlp = g.linear(g.op("Mul", gate, up), p + "mlp.down_proj", ff, hidden, False)
        if gemma2:
            mlp = _rms_norm(g, mlp, p + "post_feedforward_layernorm.weight", hidden, eps)
        x = g.op("Add", x, mlp)
    x = _rms_norm(g, x, TEXT + "norm.weight", hidden, eps)
    head = g.weight(TEXT + "embed_tokens.weight" if tied else HEAD, [vocab, hidden])
    logits = cap(g.op("MatMul", x, g.op("Transpose", head, perm=[1, 0])), final_cap)
    g.output(logits, "logits")
    g.graph.outputs.insert(0, g.graph.outputs.pop())  # logits first, then the cache
    return g.model()
