"""Mistral 3 adaptations of mobius's module before it builds the graphs."""

from __future__ import annotations

from typing import Any

from mmforge.backend.errors import MmforgeError


def vision_activation(module: Any, hf_config: Any) -> None:
    """Build the Pixtral vision MLP with the activation the config names.

    mobius 0.1 builds every Pixtral vision MLP with a fixed SiLU
    (components/_pixtral_vision.py); transformers applies `vision_config.hidden_act`,
    whose default is GELU, so a checkpoint saved with defaults would convert to another
    function, silently. Each vision layer's gate activation is replaced here.
    """
    from mobius.components._activations import ACT2FN
    from mobius.components._pixtral_vision import PixtralTransformerLayer

    act = getattr(getattr(hf_config, "vision_config", None), "hidden_act", None) or "gelu"
    if act not in ACT2FN:
        raise MmforgeError(
            f"vision_config.hidden_act {act!r} has no ONNX form in mmforge's graph builder",
            f"Supported: {', '.join(sorted(ACT2FN))}",
        )
    layers = [m for m in module.modules() if isinstance(m, PixtralTransformerLayer)]
    if not layers:
        raise MmforgeError(
            "The Mistral 3 vision graph has no Pixtral layers to set the activation of",
            "This is a conversion bug for this model; report the model id",
        )
    for layer in layers:
        layer.feed_forward.act_fn = ACT2FN[act]
