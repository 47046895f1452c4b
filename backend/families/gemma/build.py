"""Gemma 3 and 4: what mobius is told before the build."""

from __future__ import annotations

from typing import Any

from mmforge.backend.errors import LayoutError


def flat_head_dims(hf_config: Any) -> None:
    """Gemma 4: give mobius the flat `global_head_dim` it reads.

    transformers 5 moves the global layers' head size into `per_layer_config` and makes
    `head_dim` raise AmbiguousGlobalPerLayerAttributeError when read globally.
    """
    # The audio head count and all-bidirectional attention are refused by fields.GEMMA4.
    text = getattr(hf_config, "text_config", hf_config)
    text.allow_global_per_layer_attribute_access = True
    per_layer = text.to_dict().get("per_layer_config") or {}
    sizes = {v["head_dim"] for v in per_layer.values() if isinstance(v, dict) and "head_dim" in v}
    if len(sizes) > 1:
        raise LayoutError(f"Several global head sizes in per_layer_config: {sorted(sizes)}")
    object.__setattr__(text, "global_head_dim", sizes.pop() if sizes else text.head_dim)


def query_pre_attn_scalar(module: Any, hf_config: Any) -> None:
    """Gemma 3: scale attention scores by query_pre_attn_scalar**-0.5, as transformers does.

    mobius scales by head_dim**-0.5; the released 27B model has head_dim 128 and
    query_pre_attn_scalar 168, so its attention would be sharper than trained.
    """
    text = getattr(hf_config, "text_config", hf_config)
    scalar = getattr(text, "query_pre_attn_scalar", None)
    if not scalar:
        return
    layers = module.decoder.model.layers
    for layer in layers:
        layer.self_attn.scaling = float(scalar) ** -0.5
