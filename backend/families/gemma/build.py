"""Gemma 4: the config normalisation mobius needs before the build."""

from __future__ import annotations

from typing import Any

from mmforge.backend.errors import LayoutError, MmforgeError


def flat_head_dims(hf_config: Any) -> None:
    """Gemma 4: give mobius the flat `global_head_dim` it reads.

    transformers 5 moves the global layers' head size into `per_layer_config` and makes
    `head_dim` raise AmbiguousGlobalPerLayerAttributeError when read globally.
    """
    audio = getattr(hf_config, "audio_config", None)
    if audio is not None and getattr(audio, "num_attention_heads", 8) != 8:
        raise MmforgeError(
            f"This Gemma 4 audio encoder has {audio.num_attention_heads} attention heads",
            "The graph builder (mobius 0.1) supports the released layout with 8",
        )
    text = getattr(hf_config, "text_config", hf_config)
    if getattr(text, "use_bidirectional_attention", None) == "all":
        # Every token attends both ways: not a generative decoder the runtime can drive.
        raise MmforgeError(
            "This Gemma 4 checkpoint attends bidirectionally over all tokens",
            "Only causal (or image-bidirectional) Gemma 4 checkpoints can be converted",
        )
    text.allow_global_per_layer_attribute_access = True
    per_layer = text.to_dict().get("per_layer_config") or {}
    sizes = {v["head_dim"] for v in per_layer.values() if isinstance(v, dict) and "head_dim" in v}
    if len(sizes) > 1:
        raise LayoutError(f"Several global head sizes in per_layer_config: {sorted(sizes)}")
    object.__setattr__(text, "global_head_dim", sizes.pop() if sizes else text.head_dim)
