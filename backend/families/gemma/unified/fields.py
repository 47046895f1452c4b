"""Gemma 4 unified's config fields (transformers 5.24 Gemma4UnifiedConfig).

The text model is Gemma 4's (the graph builder builds both with the same decoder), so its
fields follow Gemma 4's table; the encoder-free embedders' fields are their own. Values
other than the released ones are refused where the builder was not measured with them.
"""

from __future__ import annotations

from mmforge.backend.families._fields import COMMON_INERT, Rule, honoured, only, shapes
from mmforge.backend.families.gemma.fields import GEMMA4

# Gemma 4's rules for what both configs share: the common bookkeeping, the text model
# and the token ids; its vision and audio tower rules do not apply.
_SHARED = COMMON_INERT + tuple(
    rule
    for rule in GEMMA4
    if rule not in COMMON_INERT
    and not rule.path.startswith(("vision_config.", "audio_config."))
    and rule.path
    not in (
        "text_config.vocab_size_per_layer_input",
        "text_config.hidden_size_per_layer_input",
    )
)

GEMMA4_UNIFIED: tuple[Rule, ...] = (
    *_SHARED,
    *shapes("vision_config.", "mm_embed_dim", "mm_posemb_size", "output_proj_dims"),
    honoured(
        "vision_config.patch_size",
        "the merged patch size the runtime cuts (× pooling_kernel_size)",
    ),
    honoured(
        "vision_config.pooling_kernel_size",
        "the merged patch size the runtime cuts (× patch_size)",
    ),
    only(
        "vision_config.rms_norm_eps",
        1e-6,
        note="the vision embedder's RMSNorm is built with the released epsilon",
    ),
    honoured("audio_config.audio_embed_dim", "samples per audio frame (the processor JSON)"),
    only(
        "audio_config.rms_norm_eps",
        1e-6,
        note="the audio embedder's RMSNorm is built with the released epsilon",
    ),
)
