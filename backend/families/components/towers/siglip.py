"""SigLIP's encoder (transformers 5's SiglipEncoder) and post layernorm, written op by op.

The layers are the same in every SigLIP tower, and in CLIP's (LLaVA's tower reads their
hidden states, `encoder_states`): what differs between families is how the patches are
embedded (a fixed grid: PaliGemma; the picture's own size with bucketed positions:
`towers/navit.py`; CLIP's class token), and the activation the config names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mmforge.backend.families.components.graph_builder import GraphBuilder


def encoder_states(
    g: GraphBuilder,
    x: Any,
    prefix: str,
    layers: int,
    width: int,
    heads: int,
    ff: int,
    eps: float,
    activation: Callable[[Any], Any],
) -> list[Any]:
    """The encoder's hidden states on patch embeddings [N, P, width]: the input, then each layer's.

    Each layer (SiglipEncoderLayer, and CLIPEncoderLayer, which is the same): LayerNorm,
    multi-head self-attention (biased q/k/v/out projections, no mask: every patch is a
    picture's), residual; LayerNorm, fc1, `activation`, fc2, residual. The weights are
    under `prefix` + "encoder.layers.{i}."; index 0 is the input, as in transformers'
    `hidden_states`.
    """
    head_dim = width // heads
    split = g.const(np.array([0, 0, heads, head_dim]))

    def heads_first(t: Any) -> Any:
        return g.op("Transpose", g.op("Reshape", t, split), perm=[0, 2, 1, 3])

    states = [x]
    for i in range(layers):
        p = f"{prefix}encoder.layers.{i}."
        h = g.layer_norm(x, p + "layer_norm1", width, eps)
        q = heads_first(g.linear(h, p + "self_attn.q_proj", width, width))
        k = heads_first(g.linear(h, p + "self_attn.k_proj", width, width))
        val = heads_first(g.linear(h, p + "self_attn.v_proj", width, width))
        scores = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
        scores = g.op("Mul", scores, g.const(np.float32(head_dim**-0.5)))
        ctx = g.op("MatMul", g.op("Softmax", scores, axis=-1), val)
        ctx = g.op(
            "Reshape", g.op("Transpose", ctx, perm=[0, 2, 1, 3]), g.const(np.array([0, 0, width]))
        )
        x = g.op("Add", x, g.linear(ctx, p + "self_attn.out_proj", width, width))
        h = g.layer_norm(x, p + "layer_norm2", width, eps)
        h = activation(g.linear(h, p + "mlp.fc1", width, ff))
        x = g.op("Add", x, g.linear(h, p + "mlp.fc2", ff, width))
        states.append(x)
    return states


def siglip_encoder(
    g: GraphBuilder,
    x: Any,
    prefix: str,
    layers: int,
    width: int,
    heads: int,
    ff: int,
    eps: float,
    activation: Callable[[Any], Any],
) -> Any:
    """SigLIP's encoder on patch embeddings [N, P, width], then its post layernorm.

    Each layer: LayerNorm, multi-head self-attention (biased q/k/v/out projections, no
    mask: every patch is a picture's), residual; LayerNorm, fc1, `activation`, fc2,
    residual (`encoder_states`). The weights are under `prefix` + "encoder.layers.{i}."
    (PaliGemma's and Idefics2's towers).
    """
    states = encoder_states(g, x, prefix, layers, width, heads, ff, eps, activation)
    return g.layer_norm(states[-1], prefix + "post_layernorm", width, eps)
