"""GLM-4.6V (glm46v): GLM-4.1V's tower with GLM-4's dense decoder or GLM-4.5's experts.

transformers' Glm46VModel is Glm4vModel built from its sub-configs (`AutoModel` of
`vision_config`, a glm4v_vision, and `text_config`): a glm4v_text decoder
(GLM-4.6V-Flash) or a glm4v_moe_text one (GLM-4.6V, a mixture of experts); its processor
is Glm4vProcessor for pictures (Glm46VProcessor changes only a video frame's timestamp
text). So GLM-4.6V-Flash is GLM-4.1V's entry under the glm46v model_type (the same
package, graphs, reference and tests); GLM-4.6V, chosen by `text_config.model_type`
(`Recognition.variant`), is GLM-4.5V's entry, named but not converted yet
(`FUSED_EXPERTS`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.families._base import Family, Fixtures, Recognition
from mmforge.backend.families._hooks import VariantRequest
from mmforge.backend.families.glm4v import tiny

MOE_TEXT = "glm4v_moe_text"
HF_CLASS = "Glm46VForConditionalGeneration"


def _glm46v_config(base: Any) -> Any:
    """A tiny config's Glm46VConfig of the same sizes (`base`: GLM-4.1V's or GLM-4.5V's)."""

    def make(s: dict[str, int], vocab: int) -> Any:
        from transformers import Glm46VConfig

        config = base.make_config(s, vocab)
        ids = (
            *("image_token_id", "video_token_id", "image_start_token_id"),
            *("image_end_token_id", "video_start_token_id", "video_end_token_id"),
        )
        return Glm46VConfig(
            text_config=config.text_config.to_dict(),
            vision_config=config.vision_config.to_dict(),
            tie_word_embeddings=False,
            **{k: getattr(config, k) for k in ids},
        )

    return make


def _tiny(base: Any, key: str) -> Any:
    return dataclasses.replace(
        base, family_key=key, hf_class=HF_CLASS, make_config=_glm46v_config(base)
    )


# Measured with transformers 5.25: Glm46VForConditionalGeneration writes its experts fused
# (`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`: no checkpoint conversion is
# registered for glm46v), where GLM-4.5V's checkpoints hold one tensor per expert, the
# layout mmforge's experts decoder reads (decoder_moe.py).
FUSED_EXPERTS = (
    "GLM-4.6V's experts are not converted yet: transformers 5.25 writes a glm46v "
    "checkpoint's experts fused (mlp.experts.gate_up_proj and down_proj), and mmforge's "
    "mixture-of-experts decoder reads one tensor per expert (GLM-4.5V's layout); "
    "GLM-4.6V-Flash, its dense sibling, converts"
)


def make(dense: Family, moe: Family) -> tuple[Family, Family]:
    """GLM-4.6V's two entries: dense (GLM-4.6V-Flash) and, as its variant, the experts."""
    experts = dataclasses.replace(
        moe,
        key="glm46v_moe",
        name="GLM-4.6V",
        recognition=Recognition(model_types=("glm46v",)),
        profile=dataclasses.replace(moe.profile, hf_class=HF_CLASS),
        not_converted=FUSED_EXPERTS,
        fixtures=Fixtures(),
    )

    def variant(request: VariantRequest) -> Family | None:
        text = request.config.get("text_config")
        return experts if isinstance(text, dict) and text.get("model_type") == MOE_TEXT else None

    flash = dataclasses.replace(
        dense,
        key="glm46v",
        name="GLM-4.6V-Flash",
        recognition=Recognition(model_types=("glm46v",), variant=variant),
        profile=dataclasses.replace(dense.profile, hf_class=HF_CLASS),
        fixtures=Fixtures(
            tiny=_tiny(tiny.GLM4V, "glm46v"),
            # GLM-4.1V's expectations, less its release's (no glm46v release shape).
            expect=dataclasses.replace(dense.fixtures.expect, released_rounded=()),
        ),
    )
    return flash, experts
