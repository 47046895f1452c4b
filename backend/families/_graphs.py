"""What a graph builder hands to the weight stage, and a guard for builders that print."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# The components, in the seeds' I/O contract names.
COMPONENT_NAMES = ("vision_encoder", "audio_encoder", "embedding", "decoder")


@dataclass
class BuiltGraphs:
    """Graphs without weights, and what is needed to route checkpoint weights to them.

    Attributes:
        models: Component name to `onnx_ir.Model`.
        module: The mobius module that built them (it knows the weight renames), or None.
        baked: Components whose weights the builder wrote itself: initializer name to
            (checkpoint tensors, how they combine: weights.BAKED_KINDS). The weight
            plan checks each against the checkpoint instead of filling it.
        work: A scratch folder the graphs' external data lives in until they are written.
        notes: What the build fixed, for the manifest.
    """

    models: dict[str, Any]
    module: Any = None
    baked: dict[str, dict[str, tuple[tuple[str, ...], str]]] = dataclasses.field(
        default_factory=dict
    )
    work: Path | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    def rename_weights(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """Map checkpoint names to initializer names (mobius's per-family renames)."""
        if self.module is not None and hasattr(self.module, "preprocess_weights"):
            return dict(self.module.preprocess_weights(dict(state_dict)))
        return dict(state_dict)


@contextlib.contextmanager
def quiet_library() -> Iterator[None]:
    """Swallow what a library prints or draws (mobius uses print and tqdm)."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        yield
    text = sink.getvalue().strip()
    if text:
        log.debug("library output:\n%s", text[-4000:])
