"""The family registry, and the public API the stages use to reach a family.

`lookup(model_type)` returns the family's entry. A family is a typed plugin: one folder
(and one line in `FOLDERS`) whose `__init__.py` exports `FAMILIES`, each a `Family` in
its parts:
- `Recognition`: which checkpoints it is (model types, remote-code types, variants);
- `Profile`: what inspect and the Model card say (projector, token ids, fields, notes);
- `PackageSpec`: the package it needs (config fields, processor JSON, graph fixes in
  `graph_fixes.py`, builder adaptations in `build.py`);
- `Reference`: verify's HF side (`reference.py`);
- `Fixtures`: its tiny and release-shaped test checkpoints (`tiny.py`) and what the
  tests expect of it (`expect.py`).
Every hook takes one request object (`FixRequest`, `ReferenceRequest`, ...) and returns a
concrete type. No stage branches on a family key, and no stage imports the private
modules (`_base`, `_graphs`, ...): an import contract holds them to this module.

What families share lives in `components/` (graph builder, tokenizer helpers, the hosts'
pieces, towers), beside the private `_*.py` modules; a family folder imports those and
its own modules, never another family's (an independence contract in pyproject.toml).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from importlib import import_module
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import (
    Approximation,
    Cfg,
    DefaultConfig,
    Expectations,
    Family,
    Fixtures,
    ImageTokens,
    PackageSpec,
    Profile,
    Projector,
    Recognition,
    Reference,
)
from mmforge.backend.families._fields import FieldReview, review
from mmforge.backend.families._graphs import COMPONENT_NAMES, BuiltGraphs, quiet_library
from mmforge.backend.families._hooks import (
    BuildRequest,
    FixRequest,
    LayoutCheck,
    LayoutRequest,
    LimitRequest,
    PixelsRequest,
    PreparedWeights,
    ReferenceRequest,
    RuntimeArrays,
    Variant,
    VariantRequest,
    WeightsRequest,
)
from mmforge.backend.families._reference import (
    ReferenceInputs,
    audio_features,
    image_processor,
    load_clip,
)
from mmforge.backend.runtime_types import SPEECH_MODEL_TYPES

# The public API: the stages (convert, verify, chat, inspect) import these names from
# `mmforge.backend.families` and nothing from its private modules (an import contract in
# pyproject.toml holds them to it).
__all__ = [
    "ALL",
    "COMPONENT_NAMES",
    "REGISTRY",
    "Approximation",
    "BuildRequest",
    "BuiltGraphs",
    "Cfg",
    "DefaultConfig",
    "Expectations",
    "Family",
    "FieldReview",
    "FixRequest",
    "Fixtures",
    "ImageTokens",
    "LayoutCheck",
    "LayoutRequest",
    "LimitRequest",
    "PackageSpec",
    "PixelsRequest",
    "PreparedWeights",
    "Profile",
    "Projector",
    "Recognition",
    "Reference",
    "ReferenceInputs",
    "ReferenceRequest",
    "Registry",
    "RuntimeArrays",
    "VariantRequest",
    "WeightsRequest",
    "audio_features",
    "by_pipeline",
    "image_processor",
    "load_clip",
    "lookup",
    "pipeline_name",
    "quiet_library",
    "review",
]

# One line per family folder; each folder's __init__.py exports FAMILIES. Adding a family
# is its folder and its line here (tests/backend/test_registry.py shows it with a
# throwaway family). The order matters only where two entries share a model_type: the
# first owns it.
FOLDERS = (
    "qwen",
    "gemma",  # Gemma 3, Gemma 4 and Gemma 4 unified (gemma/unified/)
    "mistral",
    "llava",  # the `llava` configs Pixtral does not claim (Pixtral owns model_type llava)
    "phi3v",
    "phi",
    "lfm2",
    "paligemma",
    "gemma3n",  # pictures and text, on the gemma3 pipeline
    "glm4v",  # GLM-4.1V and GLM-4.5V, on the qwen2_5_vl pipeline
    "idefics2",  # on the videochat_flash_qwen pipeline
    "idefics3",  # Idefics3 and SmolVLM, on the videochat_flash_qwen pipeline
    "internvl",  # on the videochat_flash_qwen pipeline, one view a picture
    "others",  # others.py: the families inspect names but the runtime cannot run
)


class Registry:
    """The entries of some family folders, indexed by model_type and by pipeline type.

    The first entry of a model_type owns it; later ones (Fara, a Qwen2.5-VL variant) are
    reached through its `recognition.variant`. An owner that claims only some configs
    of its model_type (`recognition.claims`) passes the others to the next entry of the
    type (`_passing_on`).
    """

    def __init__(self, folders: tuple[str, ...]):
        self.all: tuple[Family, ...] = _passing_on(
            tuple(
                family
                for folder in folders
                for family in import_module(f"{__name__}.{folder}").FAMILIES
            )
        )
        self.by_type: dict[str, Family] = {}
        for family in self.all:
            for model_type in family.recognition.model_types:
                self.by_type.setdefault(model_type, family)
        self.by_pipeline: dict[str | None, Family] = {}
        for family in self.all:
            if family.package is not None:
                self.by_pipeline.setdefault(family.pipeline_type, family)

    def lookup(self, model_type: str | None) -> Family:
        """The family for a config's `model_type` (see the module's `lookup`)."""
        return _lookup(self, model_type)


def _passing_on(entries: tuple[Family, ...]) -> tuple[Family, ...]:
    """The entries, each that claims only some configs handing the others to the next one.

    Pixtral-12B and LLaVA-1.5 are both model_type `llava`: the Pixtral entry (mistral/)
    comes first and claims the configs with a Pixtral tower; its variant here sends every
    other config to the next `llava` entry (llava/), so neither folder names the other.
    """
    out: list[Family] = []  # the later entries, last first
    for family in reversed(entries):
        recognition = family.recognition
        types = set(recognition.model_types)
        later = next((f for f in reversed(out) if types & set(f.recognition.model_types)), None)
        if recognition.claims is not None and later is not None:
            variant = _pass_on(recognition.variant, recognition.claims, later)
            family = dataclasses.replace(
                family, recognition=dataclasses.replace(recognition, variant=variant)
            )
        out.append(family)
    return tuple(reversed(out))


def _pass_on(own: Variant, claims: Callable[[dict[str, Any]], bool], later: Family) -> Variant:
    """A variant: `own` for a config the entry claims, else the next entry (or its variant)."""

    def variant(request: VariantRequest, /) -> Family | None:
        if claims(request.config):
            return own(request)
        return later.recognition.variant(request) or later

    return variant


REGISTRY = Registry(FOLDERS)
ALL: tuple[Family, ...] = REGISTRY.all
_BY_PIPELINE = REGISTRY.by_pipeline

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
    return REGISTRY.lookup(model_type)


def _lookup(registry: Registry, model_type: str | None) -> Family:
    """The family for a config's `model_type` in `registry`.

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
    family = registry.by_type.get(model_type)
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
    close = difflib.get_close_matches(model_type, list(registry.by_type), n=3, cutoff=0.5)
    hint = (
        f"Did you mean {', '.join(close)}?"
        if close
        else ("Supported families: " + ", ".join(sorted({f.name for f in registry.all})))
    )
    raise MmforgeError(f"Unknown model_type '{model_type}': no multimodal family matches", hint)
