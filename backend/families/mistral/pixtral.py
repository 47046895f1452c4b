"""Pixtral-12B: a LLaVA checkpoint with a Pixtral tower, run on the runtime's `mistral3`.

mistral-community/pixtral-12b says model_type `llava` (LlavaForConditionalGeneration)
with `vision_config.model_type: pixtral`: Mistral 3's tower and [IMG] / [IMG_BREAK] /
[IMG_END] framing, but LLaVA's projector (Linear → GELU → Linear, with biases) and no
patch merge. ORT GenAI 0.18's `mistral3` pipeline reads `model.vision.patch_size` and
`spatial_merge_size` from genai_config and lays out rows × cols of [IMG] with breaks;
with a merge of 1 each patch is one token, as PixtralProcessor does for this release.
The graphs are ours: mobius's Pixtral vision model with its Mistral 3 projector replaced
by LLaVA's.

Other `llava` checkpoints (LLaVA-1.5's CLIP tower) go to the LLaVA entry
(families/llava): this entry claims only the configs with a Pixtral tower
(`Recognition.claims`), and the registry hands the others to the next `llava` entry.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg, Family, Fixtures, Projector, Recognition
from mmforge.backend.families.mistral import pixtral_tiny
from mmforge.backend.families.mistral.build import vision_activation
from mmforge.backend.families.mistral.expect import PIXTRAL
from mmforge.backend.families.mistral.fields import PIXTRAL_LLAVA


def _projector(cfg: Cfg) -> Projector:
    act = cfg.get("projector_hidden_act", "gelu")
    bias = bool(cfg.get("multimodal_projector_bias", True))
    return Projector(
        "LlavaMultiModalProjector",
        "Linear → GELU → Linear",
        f"model_type llava with a Pixtral tower (vision_config.model_type pixtral): every "
        f"patch is one token (no patch merge), then Linear → {act.upper()} → Linear"
        f"{' with biases' if bias else ''}",
        {"spatial_merge_size": 1, "projector_hidden_act": act, "multimodal_projector_bias": bias},
    )


def llava_projector(module: Any, hf_config: Any) -> None:
    """Build LLaVA's projector after mobius's Pixtral tower, and the tower's activation.

    mobius 0.1 gives every Pixtral tower Mistral 3's projector (RMSNorm, patch merge,
    bias-free Linears: models/llava.py, `_PixtralVisionEncoderModel`); transformers'
    LlavaMultiModalProjector is Linear → act → Linear with `multimodal_projector_bias`.
    """
    from mobius.components import Linear
    from mobius.components._activations import ACT2FN
    from onnxscript import nn

    vision_activation(module, hf_config)
    act_name = getattr(hf_config, "projector_hidden_act", "gelu")
    if act_name not in ACT2FN:
        raise MmforgeError(
            f"projector_hidden_act {act_name!r} has no ONNX form in mmforge's graph builder",
            f"Supported: {', '.join(sorted(ACT2FN))}",
        )
    act = ACT2FN[act_name]
    bias = bool(getattr(hf_config, "multimodal_projector_bias", True))
    width = hf_config.vision_config.hidden_size
    text = hf_config.text_config.hidden_size

    class LlavaProjector(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.linear_1 = Linear(width, text, bias=bias)
            self.linear_2 = Linear(text, text, bias=bias)

        def forward(self, op: Any, features: Any, grid_h: Any, grid_w: Any) -> Any:
            return self.linear_2(op, act(op, self.linear_1(op, features)))

    encoder = getattr(module, "vision_encoder", None)
    if encoder is None or not hasattr(encoder, "multi_modal_projector"):
        raise MmforgeError(
            "The Pixtral-12B vision graph has no projector to replace",
            "This is a conversion bug for this model; report the model id",
        )
    encoder.multi_modal_projector = LlavaProjector()


def _is_pixtral(config: dict[str, Any]) -> bool:
    vision = config.get("vision_config")
    return isinstance(vision, dict) and vision.get("model_type") == "pixtral"


def make(mistral3: Family) -> Family:
    """The Pixtral-12B entry: Mistral 3's pipeline, package and reference, LLaVA's projector."""
    assert mistral3.package is not None

    package = dataclasses.replace(
        mistral3.package,
        module_patch=llava_projector,
        # mobius's `llava` task declares a fixed picture size, whose RoPE it folds into
        # constants; its `pixtral` entry (the same model class) takes any picture size.
        builder_type=lambda cfg: "pixtral",
        fused_attention=lambda cfg: True,
        notes=(
            "Pixtral-12B (llava with a Pixtral tower) runs on the mistral3 pipeline with "
            "spatial_merge_size 1: one [IMG] per patch, as PixtralProcessor lays them out.",
            *mistral3.package.notes,
        ),
    )
    return dataclasses.replace(
        mistral3,
        key="pixtral",
        name="Pixtral",
        recognition=Recognition(model_types=("llava",), claims=_is_pixtral),
        profile=dataclasses.replace(
            mistral3.profile,
            hf_class="LlavaForConditionalGeneration",
            projector=_projector,
            fields=PIXTRAL_LLAVA,
            notes=(
                "Pixtral-12B is model_type llava with a Pixtral vision tower; mmforge "
                "recognises it by vision_config.model_type. Other llava checkpoints (CLIP "
                "towers) are LLaVA-1.5's.",
                *mistral3.profile.notes,
            ),
        ),
        package=package,
        fixtures=Fixtures(
            tiny=pixtral_tiny.PIXTRAL, released=pixtral_tiny.RELEASED_PIXTRAL, expect=PIXTRAL
        ),
    )


__all__ = ["make", "pixtral_tiny"]
