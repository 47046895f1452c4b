"""The family registry: one entry per Hugging Face model family.

`lookup(model_type)` returns the family's entry. Everything family-specific lives in the
family's folder and is reached through its entry: projector choice, token ids, runtime
pipeline type and limitations (`__init__.py`), the package it needs (`PackageSpec`: config
fields, processor JSON, graph fixes in `graph_fixes.py`, builder adaptations in
`build.py`), verify's HF side (`Reference`, in `reference.py`), and its tiny test
checkpoint (`tiny.py`). No stage branches on a family key.
"""

from __future__ import annotations

import difflib
from importlib import import_module

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg, Family, ImageTokens, Projector, Reference
from mmforge.backend.runtime_types import SPEECH_MODEL_TYPES

__all__ = [
    "ALL",
    "Cfg",
    "Family",
    "ImageTokens",
    "Projector",
    "Reference",
    "by_pipeline",
    "lookup",
    "pipeline_name",
]

# One line per family folder; each folder's __init__.py exports FAMILIES. The order
# matters only where two entries share a model_type: the first owns it.
FOLDERS = (
    "qwen",
    "gemma",
    "gemma4_unified",
    "mistral",
    "phi3v",
    "phi",
    "lfm2",
    "others",  # others.py: the families inspect names but the runtime cannot run
)
ALL: tuple[Family, ...] = tuple(
    family for folder in FOLDERS for family in import_module(f"{__name__}.{folder}").FAMILIES
)

# The first entry of a model_type owns it; later ones (Fara, a Qwen2.5-VL variant) are
# reached through its `variant`.
_BY_TYPE: dict[str, Family] = {}
for _family in ALL:
    for _type in _family.model_types:
        _BY_TYPE.setdefault(_type, _family)
_BY_PIPELINE = {f.pipeline_type: f for f in ALL if f.package is not None}

# Text-only relatives that people pick by mistake; they get a pointed message.
_TEXT_ONLY = {
    "qwen2": "Qwen2",
    "qwen3": "Qwen3",
    "qwen2_5_vl_text": "Qwen2.5-VL's text model",
    "gemma": "Gemma",
    "gemma2": "Gemma 2",
    "gemma3_text": "Gemma 3 (text-only)",
    "gemma4_text": "Gemma 4 (text-only)",
    "llama": "Llama",
    "mistral": "Mistral",
    "phi3": "Phi-3",
    "phi": "Phi",
    "lfm2": "LFM2",
}


def by_pipeline(pipeline_type: str) -> Family | None:
    """The family whose packages have this ONNX Runtime GenAI `model.type`, if any."""
    return _BY_PIPELINE.get(pipeline_type)


def pipeline_name(pipeline_type: str) -> str:
    """A package's model type as a user knows it: its family's name ("Qwen2.5-VL")."""
    family = by_pipeline(pipeline_type)
    return family.name if family is not None else pipeline_type


def lookup(model_type: str | None) -> Family:
    """The family for a config's `model_type`.

    Raises:
        MmforgeError: No model_type, a text-only model, or a type no entry knows; the
            message suggests the closest known types.
    """
    if model_type is not None and not isinstance(model_type, str):
        raise MmforgeError(
            f"config.json: model_type is {type(model_type).__name__}, not a name",
            "The config is malformed or hostile: fix it or download the model again",
        )
    if not model_type:
        raise MmforgeError(
            "config.json has no model_type",
            "Is this a transformers model folder? mmforge needs model_type to pick the family",
        )
    family = _BY_TYPE.get(model_type)
    if family is not None:
        return family
    if model_type in SPEECH_MODEL_TYPES:
        runtime = SPEECH_MODEL_TYPES[model_type]
        where = (
            f"ONNX Runtime GenAI runs it as its speech-to-text pipeline '{runtime}'"
            if runtime
            else "ONNX Runtime GenAI 0.18 has no pipeline for it"
        )
        raise MmforgeError(
            f"model_type '{model_type}' is a speech-to-text model, not a chat model: {where}",
            "mmforge converts vision/audio + language chat models; for speech-to-text use "
            "onnxruntime_genai.models.builder",
        )
    if model_type in _TEXT_ONLY:
        raise MmforgeError(
            f"{_TEXT_ONLY[model_type]} (model_type '{model_type}') is a text-only model",
            "mmforge converts vision/audio + language models; for text-only models use "
            "onnxruntime_genai.models.builder",
        )
    close = difflib.get_close_matches(model_type, list(_BY_TYPE), n=3, cutoff=0.5)
    hint = (
        f"Did you mean {', '.join(close)}?"
        if close
        else ("Supported families: " + ", ".join(sorted({f.name for f in ALL})))
    )
    raise MmforgeError(f"Unknown model_type '{model_type}': no multimodal family matches", hint)
