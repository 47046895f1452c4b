"""The family hooks: each takes one request object and returns a concrete type.

These type the fields of `PackageSpec`, `Reference` and `Recognition` (_base.py) that hold
a family's functions. A stage builds the request; a family's function reads what it needs
from it by name, so a hook that later needs one more fact gains a field, not a parameter
that every family's function must change for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image
    from transformers import PreTrainedTokenizerBase

    from mmforge.backend.checkpoint import Checkpoint
    from mmforge.backend.families._base import Cfg, Family
    from mmforge.backend.families._graphs import BuiltGraphs
    from mmforge.backend.families._reference import ReferenceInputs
    from mmforge.backend.jobs import JobContext
    from mmforge.backend.tensors import TensorRef


# --- convert -------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildRequest:
    """What a family's own graph builder gets: the checkpoint, a scratch folder, the job."""

    checkpoint: Checkpoint
    work: Path
    ctx: JobContext


class BuildGraphs(Protocol):
    """A family's own graph builder (for families mobius does not build)."""

    def __call__(self, request: BuildRequest, /) -> BuiltGraphs: ...


@dataclass(frozen=True)
class WeightsRequest:
    """The checkpoint and its tensors (name -> TensorRef), before they are mapped."""

    checkpoint: Checkpoint
    tensors: dict[str, TensorRef]


@dataclass(frozen=True)
class PreparedWeights:
    """The tensors the weight stage maps, and a line for the manifest ("" for none)."""

    tensors: dict[str, TensorRef]
    note: str = ""


class PrepareWeights(Protocol):
    """Adapts the checkpoint's tensors before they are mapped (Phi-4's vision LoRA)."""

    def __call__(self, request: WeightsRequest, /) -> PreparedWeights: ...


@dataclass(frozen=True)
class FixRequest:
    """The built component models (name -> onnx_ir.Model) and the config they came from.

    `folder`: the checkpoint's folder, for a fix that needs its tokenizer's ids.
    """

    models: dict[str, Any]
    cfg: Cfg
    folder: Path | None = None


class GraphFix(Protocol):
    """Surgery on the built graphs; a line for the manifest, or None when nothing was done."""

    def __call__(self, request: FixRequest, /) -> str | None: ...


# --- recognition ---------------------------------------------------------------------


@dataclass(frozen=True)
class VariantRequest:
    """config.json as written and the checkpoint's folder."""

    config: dict[str, Any]
    folder: Path


class Variant(Protocol):
    """Another entry for a checkpoint of this model_type, or None."""

    def __call__(self, request: VariantRequest, /) -> Family | None: ...


def no_variant(request: VariantRequest, /) -> Family | None:
    """Every checkpoint of the model_type is the entry itself."""
    return None


# --- verify --------------------------------------------------------------------------


@dataclass(frozen=True)
class ReferenceRequest:
    """What the HF side of verify builds its inputs from.

    Attributes:
        checkpoint: The checkpoint, with its processors' settings.
        tokenizer: Its tokenizer.
        prompt: The templated prompt, placeholders not yet expanded ("" for a checkpoint
            that ships no chat template: `Reference.untemplated`).
        images: The pictures as transformers loads them.
        clips: Clip files, or (samples, rate) pairs.
        messages: The conversation as given (content as parts), for a family whose
            processor writes the prompt itself (`Reference.untemplated`).
    """

    checkpoint: Checkpoint
    tokenizer: PreTrainedTokenizerBase
    prompt: str
    images: list[Image.Image]
    clips: list[Any]
    messages: list[dict[str, Any]] = field(default_factory=list)


class PrepareReference(Protocol):
    """HF model inputs from the checkpoint's own processors."""

    def __call__(self, request: ReferenceRequest, /) -> ReferenceInputs: ...


@dataclass(frozen=True)
class RuntimeArrays:
    """The runtime processor's arrays, and HF inputs (holding the runtime's ids) to fill."""

    cfg: Cfg
    arrays: dict[str, np.ndarray]
    inputs: ReferenceInputs


class FromRuntime(Protocol):
    """Puts the runtime processor's arrays into `request.inputs` under HF's names."""

    def __call__(self, request: RuntimeArrays, /) -> None: ...


@dataclass(frozen=True)
class PixelsRequest:
    """Both sides' pixels, for a family whose HF pixels must be made comparable.

    Attributes:
        checkpoint: The checkpoint.
        images: The pictures as transformers loads them.
        arrays: The runtime processor's arrays.
        hf: HF's pixels as [3, everything else].
        runtime: The runtime's pixels as [3, everything else].
    """

    checkpoint: Checkpoint
    images: list[Image.Image]
    arrays: dict[str, np.ndarray]
    hf: np.ndarray
    runtime: np.ndarray


class HfPixels(Protocol):
    """HF's pixels to compare with the runtime's, as [3, everything else]."""

    def __call__(self, request: PixelsRequest, /) -> np.ndarray: ...


@dataclass(frozen=True)
class LayoutRequest:
    """The runtime's prompt ids and arrays, checked against its own image sizes."""

    cfg: Cfg
    ids: list[int]
    arrays: dict[str, np.ndarray]
    image_token: int | None
    tokenizer: PreTrainedTokenizerBase


@dataclass(frozen=True)
class LayoutCheck:
    """Whether the runtime's placeholder layout holds, and what was found."""

    holds: bool
    found: str


class PlaceholderLayout(Protocol):
    """Checks the runtime's placeholder layout against its own image sizes."""

    def __call__(self, request: LayoutRequest, /) -> LayoutCheck: ...


@dataclass(frozen=True)
class LimitRequest:
    """A prompt's shape: the checkpoint and how many images and clips it holds."""

    checkpoint: Checkpoint
    images: int
    clips: int


class KnownLimit(Protocol):
    """The sentence naming a difference the package has by design for this prompt, or None."""

    def __call__(self, request: LimitRequest, /) -> str | None: ...
