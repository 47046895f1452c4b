"""LightOnOCR: a Pixtral tower and Mistral 3's projector before a Qwen3 text model.

transformers 5 names it model_type `lighton_ocr` (LightOnOcrForConditionalGeneration);
lightonai/LightOnOCR-1B-1025's config.json as first released says `mistral3` with a
`qwen3` text model instead, and the Mistral 3 entry refuses that text model (fields.py)
for the reason below. Its tower and projector are Mistral 3's, so the
runtime's `mistral3` pipeline is the natural host, but that pipeline frames every picture
with a row marker the model was never given, so it is refused there (measured:
scripts/lightonocr_on_mistral3.py):

- ORT GenAI 0.18, src/models/mistral3_image_processor.cpp, `BuildImageTokenSequence`
  (called from `ProcessPixtralPrompt`): after each row of [IMG] it always appends
  [IMG_BREAK], and [IMG_END] after the last; nothing in genai_config turns that off. On
  the installed wheel a mistral3 package's processor laid out 234 [IMG] with 12
  [IMG_BREAK] and 1 [IMG_END] for a 13-row picture.
- transformers' LightOnOcrProcessor.replace_image_token puts [IMG] x rows*cols and no
  markers. A tiny random LightOnOCR fed the runtime's framing instead: last-position
  logits cosine 0.72, max abs diff 1.70, another argmax. The extra positions shift every
  later RoPE position and take attention weight, so no embedding or decoder graph of
  ours can undo them.
"""

from __future__ import annotations

import math

from mmforge.backend.families._base import (
    Cfg,
    DefaultConfig,
    Expectations,
    Family,
    Fixtures,
    ImageTokens,
    Profile,
    Projector,
    Recognition,
    as_int,
    ids,
)

NO_MISTRAL3 = (
    "ONNX Runtime GenAI 0.18 has no lighton_ocr model type, and its mistral3 pipeline "
    "cannot host it: src/models/mistral3_image_processor.cpp (BuildImageTokenSequence) "
    "always closes each row of [IMG] with [IMG_BREAK] / [IMG_END], which LightOnOCR's "
    "processor never puts in its prompt (measured: a tiny LightOnOCR's logits move to "
    "cosine 0.72 with those markers)"
)


def _projector(cfg: Cfg) -> Projector:
    merge = int(cfg.get("spatial_merge_size", 2))
    return Projector(
        "Mistral3MultiModalProjector",
        "RMSNorm → spatial merge → Linear → GELU → Linear",
        f"model_type lighton_ocr: Mistral 3's projector (spatial_merge_size={merge}, "
        "bias-free Linears) before a Qwen3 text model",
        {"spatial_merge_size": merge, "projector_hidden_act": "gelu"},
    )


def _image_tokens(cfg: Cfg, pre: Cfg) -> ImageTokens:
    patch = as_int(pre.first("patch_size.height", "patch_size", default=14))
    merge = int(cfg.get("spatial_merge_size", 2))
    edge = int(pre.first("size.longest_edge", default=cfg.get("vision_config.image_size", 1540)))
    side = math.ceil(edge / (patch * merge))
    return ImageTokens(
        minimum=1,
        maximum=side * side,
        rule=f"rows × cols of {patch * merge}px blocks (longest edge ≤ {edge}px), no row markers",
    )


LIGHTONOCR = Family(
    key="lighton_ocr",
    name="LightOnOCR",
    pipeline_type=None,
    recognition=Recognition(model_types=("lighton_ocr",)),
    profile=Profile(
        projector=_projector,
        token_ids=lambda cfg: ids(cfg, image_token_id=("image_token_id", "image_token_index")),
        image_tokens=_image_tokens,
        hf_class="LightOnOcrForConditionalGeneration",
        notes=(
            "A Pixtral tower and Mistral 3's projector before a Qwen3 text model; the "
            "runtime's mistral3 framing adds row markers LightOnOCR does not use.",
        ),
    ),
    fixtures=Fixtures(
        expect=Expectations(
            default_config=DefaultConfig(
                "LightOnOcrConfig", "Mistral3MultiModalProjector", {"image_token_id": 151655}
            )
        )
    ),
    no_pipeline_reason=NO_MISTRAL3,
)
