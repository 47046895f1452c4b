"""Gemma 3n (pictures and text) on the runtime's gemma3 pipeline; its audio is not converted.

All three graphs are mmforge's (vision.py: timm's MobileNetV5 and the soft-token
embedder; graphs.py: the embedding with per-layer inputs, and the AltUp decoder). The
runtime's gemma3 processor (gemma_image_processor.cpp, ProcessImagePrompt) splices in the
very text Gemma3nProcessor writes for a picture, so the package's template only writes
`<start_of_image>` where the release's writes `<image_soft_token>` (tokens.py).
"""

from __future__ import annotations

from typing import Any

from mmforge.backend.families._base import (
    Cfg,
    Family,
    Fixtures,
    ImageTokens,
    PackageSpec,
    Profile,
    Projector,
    Recognition,
    Reference,
    ids,
    square_processor,
)
from mmforge.backend.families.gemma3n import expect, fields, reference, tiny
from mmforge.backend.families.gemma3n.build import build, picture_size
from mmforge.backend.families.gemma3n.graphs import Text
from mmforge.backend.families.gemma3n.timm_import import timm_in_transformers
from mmforge.backend.families.gemma3n.tokens import adapt_tokenizer
from mmforge.backend.picture_sizing import FIXED, Sizing, resample_name


def _projector(cfg: Cfg) -> Projector:
    vision = cfg.get("vision_config.hidden_size", 2048)
    text = cfg.get("text_config.hidden_size", 2048)
    return Projector(
        "Gemma3nMultimodalEmbedder",
        "RMSNorm → Linear → RMSNorm",
        f"Gemma 3n embeds soft vision tokens with RMSNorm, a Linear from "
        f"vision_config.hidden_size={vision} to text_config.hidden_size={text} and a "
        "post-projection RMSNorm; its hard tokens have their own embedding table",
        {"vision_config.hidden_size": vision, "text_config.hidden_size": text},
    )


def _token_ids(cfg: Cfg) -> dict[str, int]:
    return ids(
        cfg,
        image_token_id="image_token_id",
        audio_token_id="audio_token_id",
        boi_token_id="boi_token_id",
        eoi_token_id="eoi_token_id",
        boa_token_id="boa_token_id",
        eoa_token_id="eoa_token_id",
    )


def _processor(cfg: Cfg, pre: Cfg) -> dict[str, Any]:
    """SiglipImageProcessor's square resize and rescale (Gemma 3n does not normalise).

    Chat and verify hand the runtime pictures already at this size (picture_sizing), so
    the runtime's Resize leaves them as they are.
    """
    return square_processor("gemma_3_image_processing", picture_size(pre), pre, resample=2)


def _sizing(cfg: Cfg, pre: Cfg) -> Sizing:
    """SiglipImageProcessor's fixed square size (the aspect is not kept), bilinear."""
    size = picture_size(pre)
    return Sizing(
        rule=FIXED, resample=resample_name(pre.get("resample"), "bilinear"), width=size, height=size
    )


GEMMA3N_PACKAGE = PackageSpec(
    model_fields=lambda cfg: ids(cfg, image_token_id="image_token_id"),
    vision_fields=lambda cfg, pre: {},
    vision_inputs={"pixel_values": "pixel_values"},
    processor_json=_processor,
    picture_sizing=_sizing,
    build=build,
    adapt_tokenizer=adapt_tokenizer,
    # The runtime's KV cache count: the layers that own a cache (the rest reuse theirs).
    decoder_fields=lambda cfg: {"num_hidden_layers": Text(cfg).first_shared},
    # Pictures and text: the audio tower (and its soft-token norm) is not converted.
    unused_ok=lambda cfg: (
        r"(model\.)?audio_tower\.",
        r"(model\.)?embed_audio\.soft_embedding_norm\.",
        # transformers keeps the scale, unused, when altup_correct_scale is off
        *(() if Text(cfg).correct_scale else (r".*\.altup\.correct_output_scale$",)),
    ),
    # f16 packages come from mobius's f16 build (convert/graphs.py); these graphs are f32.
    dtypes=("f32", "int4"),
    notes=(
        "Graphs: all three are mmforge's (mobius 0.1 has no MobileNetV5, and its Gemma 3n "
        "decoder shares no KV cache between layers).",
        "Runs on ONNX Runtime GenAI's gemma3 pipeline: it splices in Gemma3nProcessor's own "
        "picture text (256 soft tokens), and the embedding hands the decoder its "
        "per-layer inputs.",
        "The decoder's last num_kv_shared_layers layers read the cache of the last owning "
        "layer of their kind; genai_config's num_hidden_layers counts the owning layers.",
        "Audio is not converted: the package takes pictures and text.",
    ),
)

GEMMA3N = Family(
    key="gemma3n",
    name="Gemma 3n",
    pipeline_type="gemma3",
    recognition=Recognition(model_types=("gemma3n",)),
    profile=Profile(
        projector=_projector,
        token_ids=_token_ids,
        image_tokens=lambda cfg, pre: ImageTokens(
            fixed=int(cfg.get("vision_soft_tokens_per_image", 256)),
            rule="a square picture through MobileNetV5 to 16×16 soft tokens, framed by "
            "<start_of_image> … <end_of_image> with a blank line either side",
        ),
        hf_class="Gemma3nForConditionalGeneration",
        runtime_token_strings=("<start_of_image>", "<image_soft_token>", "<end_of_image>"),
        fields=fields.GEMMA3N,
        text_placeholder=lambda kind, n: "<start_of_image>",
        notes=(
            "Pictures and text convert; sound does not: no ONNX Runtime GenAI pipeline "
            "gives a clip the fixed 188 tokens Gemma 3n reads it as.",
            "Verify needs the timm package: transformers builds Gemma 3n's picture encoder "
            "(MobileNetV5) with it.",
        ),
    ),
    package=GEMMA3N_PACKAGE,
    reference=Reference(
        prepare=reference.prepare,
        from_runtime=reference.from_runtime,
        model_context=timm_in_transformers,
    ),
    fixtures=Fixtures(tiny=tiny.GEMMA3N, released=tiny.RELEASED_GEMMA3N, expect=expect.GEMMA3N),
)

FAMILIES = (GEMMA3N,)
