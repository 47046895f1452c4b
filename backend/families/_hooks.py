"""The family hooks' signatures, named.

These type the fields of `PackageSpec`, `Reference` and `Family` (_base.py) that hold a
family's functions. Parameters are positional-only: the stages call the hooks
positionally, and a family's function may name its parameters as it likes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mmforge.backend.checkpoint import Checkpoint
    from mmforge.backend.families._base import Cfg, Family
    from mmforge.backend.jobs import JobContext


class BuildGraphs(Protocol):
    """A family's own graph builder.

    The checkpoint, a scratch folder and the job context in; the built graphs
    (convert.graphs.BuiltGraphs) out.
    """

    def __call__(self, checkpoint: Checkpoint, work: Path, ctx: JobContext, /) -> Any: ...


class PrepareWeights(Protocol):
    """Adapts the checkpoint's tensors (name -> TensorRef) before they are mapped.

    Returns the tensors and a line for the manifest ("" for none).
    """

    def __call__(
        self, checkpoint: Checkpoint, tensors: dict[str, Any], /
    ) -> tuple[dict[str, Any], str]: ...


class GraphFix(Protocol):
    """Surgery on the built component models (name -> model) for this config.

    Returns a line for the manifest, or None when it had nothing to do.
    """

    def __call__(self, models: dict[str, Any], cfg: Cfg, /) -> str | None: ...


class PrepareReference(Protocol):
    """HF model inputs from the checkpoint's own processors.

    From the checkpoint, its tokenizer, the templated prompt, PIL images and
    (samples, rate) clips.
    """

    def __call__(
        self,
        checkpoint: Checkpoint,
        tokenizer: Any,
        prompt: str,
        images: list[Any],
        clips: list[Any],
        /,
    ) -> Any: ...


class FromRuntime(Protocol):
    """Puts the runtime processor's arrays into HF inputs under HF's names.

    Fills `inputs` (which holds the runtime's ids) in place.
    """

    def __call__(self, cfg: Cfg, arrays: dict[str, Any], inputs: Any, /) -> None: ...


class HfPixels(Protocol):
    """HF's pixels to compare with the runtime's.

    From the checkpoint, PIL images, the runtime's arrays, HF's pixels and the runtime
    evidence.
    """

    def __call__(
        self,
        checkpoint: Checkpoint,
        images: list[Any],
        arrays: dict[str, Any],
        hf_pixels: Any,
        runtime: Any,
        /,
    ) -> Any: ...


class PlaceholderLayout(Protocol):
    """Checks the runtime's placeholder layout against its own image sizes.

    From the config, the runtime's ids and arrays, the image token and the tokenizer;
    returns (whether it holds, what was found).
    """

    def __call__(
        self,
        cfg: Cfg,
        ids: list[int],
        arrays: dict[str, Any],
        image_token: int | None,
        tokenizer: Any,
        /,
    ) -> Any: ...


class KnownLimit(Protocol):
    """Names a difference the package has by design, for a prompt's images and clips.

    Returns the sentence, or None.
    """

    def __call__(self, checkpoint: Checkpoint, images: int, clips: int, /) -> str | None: ...


class Variant(Protocol):
    """Another entry for a checkpoint of this model_type, or None.

    From config.json as written and the folder.
    """

    def __call__(self, config: dict[str, Any], folder: Path, /) -> Family | None: ...
