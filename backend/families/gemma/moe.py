"""Gemma 4's larger sizes: K = V on the global layers (31B, 26B-A4B) and expert blocks (26B-A4B).

What transformers 5.24 computes (`models/gemma4/modeling_gemma4.py`):
- `attention_k_eq_v`: a full-attention layer has no `v_proj`; its values are the key
  projection's output, normed by the scale-free `v_norm` (not `k_norm`) and not rotated.
  Those layers have `per_layer_config[i].num_key_value_heads` KV heads (the release's
  `num_global_key_value_heads`), sliding layers `num_key_value_heads`.
- `enable_moe_block`: beside the dense MLP, `Gemma4TextRouter` reads the layer's residual
  (scale-free RMSNorm × `scale` × hidden**-0.5, a Linear, softmax in float32, top-k, the
  k weights renormalised to sum 1 and multiplied by `per_expert_scale`), and
  `Gemma4TextExperts` runs each chosen expert as act(gate) · up → down with the
  decoder's `hidden_activation`, on `pre_feedforward_layernorm_2(residual)`. The layer adds
  `post_feedforward_layernorm_1(mlp)` and `post_feedforward_layernorm_2(experts)` before
  `post_feedforward_layernorm`.

mobius 0.1 builds the router, the norms and K = V as transformers does once it is told
the global KV head count (it reads a flat `num_global_key_value_heads`, which transformers 5
keeps in `per_layer_config`). Its expert dispatch is wrong in both forms: the fused
`com.microsoft::MoE` path runs SwiGLU (SiLU, not the configured GELU) and drops
`per_expert_scale`; the unrolled fallback uses SiLU too. `expert_blocks` replaces it.
mobius also folds hidden**-0.5 into the router's `scale` while renaming weights, which a
rename of lazily read tensors cannot do: the router here multiplies in the graph, and its
weight goes by another name (`router_scale_name`).
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import numpy as np

from mmforge.backend.errors import LayoutError
from mmforge.backend.families.gemma.build import flat_head_dims


def gemma4_config(hf_config: Any) -> None:
    """Gemma 4: the flat global head size and global KV head count mobius reads."""
    global_kv_heads(hf_config)
    text = getattr(hf_config, "text_config", hf_config)
    # mobius 0.1 opens image blocks on the global layers too, where transformers keeps
    # them causal; the decoder is built causal and `bidirectional_image_attention` opens
    # them on the sliding layers only (the checkpoint's config still says "vision").
    if getattr(text, "use_bidirectional_attention", None) == "vision":
        object.__setattr__(text, "use_bidirectional_attention", None)


def global_kv_heads(hf_config: Any) -> None:
    """The flat global head size and global KV head count (Gemma 4 and Gemma 4 unified)."""
    flat_head_dims(hf_config)
    text = getattr(hf_config, "text_config", hf_config)
    per_layer = text.to_dict().get("per_layer_config") or {}
    heads = {
        v["num_key_value_heads"]
        for v in per_layer.values()
        if isinstance(v, dict) and "num_key_value_heads" in v
    }
    if len(heads) > 1:
        raise LayoutError(f"Several global KV head counts in per_layer_config: {sorted(heads)}")
    if heads:
        object.__setattr__(text, "num_global_key_value_heads", heads.pop())


def expert_blocks(module: Any, hf_config: Any) -> None:
    """Gemma 4 26B-A4B: each layer's experts computed as transformers does.

    Every expert runs on every token (a dense form: [experts, tokens, width] matmuls) and
    its output is weighted by the token's routing weight, zero for experts not chosen, so
    the sum equals transformers' sparse dispatch. The cost is that of all experts, not
    top-k: right for parity, slow for the released 128 experts.
    """
    decoder = getattr(module, "decoder", None)
    layers = getattr(getattr(decoder, "model", None), "layers", None)
    if layers is None:
        return
    text = getattr(hf_config, "text_config", hf_config)
    activation = getattr(text, "hidden_activation", None) or "gelu_pytorch_tanh"
    for layer in layers:
        if not getattr(layer, "_enable_moe_block", False):
            continue
        layer.expert_activation = activation
        layer.router = _router(
            int(text.hidden_size), int(text.num_experts), float(text.rms_norm_eps)
        )
        layer._dispatch_moe_fallback = types.MethodType(_dense_experts, layer)
        layer.forward = types.MethodType(_without_fused_moe(type(layer).forward), layer)


def router_scale_name(name: str) -> str:
    """The router's `scale` under the name the graph's own router gives it (unfolded)."""
    if name.endswith(".router.scale"):
        return name[: -len("scale")] + "input_scale"
    return name


def unified_names(name: str) -> str:
    """Gemma 4 unified: `router_scale_name`, and the expert tensors under mobius's names.

    mobius 0.1's Gemma 4 unified weight renames leave out the expert renames its Gemma 4
    ones make (`experts.gate_up_proj` → `fc1_experts_weights`, `down_proj` → `fc2_...`).
    """
    name = router_scale_name(name)
    for hf, graph in (
        (".experts.gate_up_proj", ".fc1_experts_weights"),
        (".experts.down_proj", ".fc2_experts_weights"),
    ):
        if name.endswith(hf):
            return name[: -len(hf)] + graph
    return name


def _router(hidden: int, experts: int, eps: float) -> Any:
    """Gemma4TextRouter as a graph module: probabilities over all experts, [T, E]."""
    import onnx_ir as ir
    from mobius.components import Linear
    from onnxscript import nn

    class Router(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.input_scale = nn.Parameter([hidden])
            self.proj = Linear(hidden, experts, bias=False)
            self.per_expert_scale = nn.Parameter([experts])

        def forward(self, op: Any, x: Any) -> Any:
            ones = op.CastLike(op.Constant(value=ir.tensor(np.ones(hidden, np.float32))), x)
            normed = op.RMSNormalization(x, ones, epsilon=eps, axis=-1)
            root = op.CastLike(op.Constant(value=ir.tensor(np.float32(hidden**-0.5))), x)
            scores = self.proj(op, op.Mul(op.Mul(normed, self.input_scale), root))
            return op.Softmax(op.Cast(scores, to=ir.DataType.FLOAT), axis=-1)

    return Router()


def _without_fused_moe(forward: Any) -> Any:
    """The layer's forward with mobius's fused MoE path off (its own dispatch then runs)."""
    from mobius._build_context import _current_ep

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        caps = dataclasses.replace(_current_ep.get(), supports_fused_moe=False)
        token = _current_ep.set(caps)
        try:
            return forward(self, *args, **kwargs)
        finally:
            _current_ep.reset(token)

    return run


def _dense_experts(self: Any, op: Any, normed_flat: Any, router_probs: Any) -> Any:
    """[T, H] expert output from the pre-normed tokens and the router's [T, E] softmax."""
    import onnx_ir as ir
    from mobius.components._activations import get_activation

    act = get_activation(self.expert_activation)
    weights, chosen = op.TopK(
        router_probs, op.Constant(value_ints=[self._top_k]), axis=-1, _outputs=2
    )
    weights = op.Div(weights, op.ReduceSum(weights, op.Constant(value_ints=[1]), keepdims=1))
    weights = op.Mul(weights, op.CastLike(op.Gather(self.router.per_expert_scale, chosen), weights))
    zeros = op.CastLike(
        op.ConstantOfShape(op.Shape(router_probs), value=ir.tensor(np.zeros(1, np.float32))),
        weights,
    )
    routing = op.ScatterElements(zeros, chosen, weights, axis=1)  # [T, E], 0 where not chosen
    tokens = op.Unsqueeze(normed_flat, op.Constant(value_ints=[0]))  # [1, T, H]
    gate_up = op.MatMul(tokens, op.Transpose(self.fc1_experts_weights, perm=[0, 2, 1]))
    gate, up = op.Split(gate_up, axis=-1, num_outputs=2, _outputs=2)  # [E, T, I] each
    out = op.MatMul(
        op.Mul(act(op, gate), up), op.Transpose(self.fc2_experts_weights, perm=[0, 2, 1])
    )
    per_expert = op.Unsqueeze(op.Transpose(routing, perm=[1, 0]), op.Constant(value_ints=[2]))
    return op.ReduceSum(
        op.Mul(out, op.CastLike(per_expert, out)), op.Constant(value_ints=[0]), keepdims=0
    )


def gemma4_architecture(cfg: Any) -> tuple[str, ...]:
    """Inspect's lines for the larger Gemma 4 forms (none for the small sizes)."""
    text = cfg.text
    lines = []
    if text.get("attention_k_eq_v"):
        kinds = text.get("layer_types") or []
        full = sum(1 for k in kinds if k == "full_attention")
        per_layer = text.get("per_layer_config") or {}
        global_kv = next(
            (
                v["num_key_value_heads"]
                for v in per_layer.values()
                if isinstance(v, dict) and "num_key_value_heads" in v
            ),
            text.get("num_global_key_value_heads", text.get("num_key_value_heads")),
        )
        lines.append(
            f"Attention: K = V on the {full} global layer{'' if full == 1 else 's'} "
            "(values are the keys' projection, "
            f"{global_kv} KV heads there, {text.get('num_key_value_heads')} on sliding layers)"
        )
    if text.get("enable_moe_block"):
        lines.append(
            f"Mixture of experts: {text.get('num_experts')} experts beside each layer's MLP, "
            f"{text.get('top_k_experts')} active per token (width "
            f"{text.get('moe_intermediate_size')}); the package computes every expert for "
            "every token, so decoding costs what the total parameters cost, not the active ones"
        )
    return tuple(lines)
