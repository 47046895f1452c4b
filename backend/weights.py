"""Applying checkpoint weights to the graphs, with a weight-mapping report.

Every checkpoint tensor ends up mapped (to one or more initializers), unused, or in a
shape mismatch; every graph initializer without a value is missing. A missing weight or
a shape mismatch is a conversion error, not a warning: the package would compute garbage.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.graphs import BuiltGraphs, fold_after_weights
from mmforge.backend.jobs import JobContext

log = logging.getLogger(__name__)


@dataclass
class WeightReport:
    """Where every checkpoint tensor went.

    Attributes:
        mapped: {"checkpoint", "shape", "targets": ["component/initializer", ...]}.
        unused: {"checkpoint", "shape"}: in the checkpoint, used by no graph.
        missing: {"component", "initializer", "shape"}: in a graph, with no weight.
        mismatched: {"checkpoint", "component", "initializer", "expected", "actual"}.
    """

    mapped: list[dict[str, Any]] = field(default_factory=list)
    unused: list[dict[str, Any]] = field(default_factory=list)
    missing: list[dict[str, Any]] = field(default_factory=list)
    mismatched: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No missing weight and no shape mismatch."""
        return not self.missing and not self.mismatched

    def summary(self) -> dict[str, int]:
        """Counts per status."""
        return {
            "mapped": len(self.mapped),
            "unused": len(self.unused),
            "missing": len(self.missing),
            "shape_mismatch": len(self.mismatched),
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (written as weights_report.json)."""
        return {"summary": self.summary(), **asdict(self)}


def load_state_dict(folder: Path, ctx: JobContext) -> dict[str, Any]:
    """Read every safetensors tensor of a checkpoint (pickled weights are never read here).

    Raises:
        MmforgeError: No safetensors, a missing shard or a corrupt file.
    """
    from safetensors import safe_open

    from mmforge.backend import checkpoint

    infos = checkpoint.local_tensors(folder)  # validates headers and shards
    if not infos:
        raise MmforgeError(
            f"{folder} has no safetensors weights",
            "Download the model's *.safetensors files (pickled .bin weights are not converted)",
        )
    files = sorted(folder.glob("*.safetensors"))
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        import json

        files = [
            folder / s for s in sorted(set(json.loads(index.read_text())["weight_map"].values()))
        ]
    state: dict[str, Any] = {}
    total = len(infos)
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                    state[name] = f.get_tensor(name)
                    ctx.report("weights", len(state), total, unit="tensors", message=name)
        except (OSError, RuntimeError, ValueError) as e:
            raise MmforgeError(
                f"{path.name} could not be read ({e})",
                "The file is corrupt: delete it and download the model again",
            ) from e
    return state


def apply_weights(
    graphs: BuiltGraphs,
    state: dict[str, Any],
    ctx: JobContext,
    normalise: Callable[[str], str] | None = None,
) -> WeightReport:
    """Assign checkpoint tensors to graph initializers and report the mapping.

    Args:
        graphs: The built graphs.
        state: Checkpoint tensors by name.
        ctx: Progress and cancel.
        normalise: The family's checkpoint-name normalisation, applied before the graph
            builder's own renames (the report keeps the original names).

    Raises:
        MmforgeError: A graph initializer has no weight, or shapes disagree.
    """
    from onnx_ir import tensor_adapters

    origin = {id(t): name for name, t in state.items()}
    if normalise is not None:
        state_for_graph = {normalise(name): t for name, t in state.items()}
    else:
        state_for_graph = state
    renamed = graphs.rename_weights(state_for_graph)
    report = WeightReport()
    targets: dict[str, list[str]] = {}
    used: set[str] = set()
    for component, model in graphs.models.items():
        for init_name, value in model.graph.initializers.items():
            ctx.check_cancel()
            tensor = renamed.get(init_name)
            if tensor is None:
                if value.const_value is None:
                    report.missing.append(
                        {
                            "component": component,
                            "initializer": init_name,
                            "shape": _shape(value.shape),
                        }
                    )
                continue
            source = origin.get(id(tensor), f"(derived) {init_name}")
            expected = _shape(value.shape)
            actual = list(tensor.shape)
            if expected is not None and expected != actual:
                report.mismatched.append(
                    {
                        "checkpoint": source,
                        "component": component,
                        "initializer": init_name,
                        "expected": expected,
                        "actual": actual,
                    }
                )
                continue
            target_dtype = tensor_adapters.to_torch_dtype(value.dtype)
            if tensor.dtype != target_dtype:
                tensor = tensor.to(target_dtype)
            value.const_value = tensor_adapters.TorchTensor(tensor, init_name)
            targets.setdefault(source, []).append(f"{component}/{init_name}")
            used.add(source)
    for name, tensor in state.items():
        if name in used:
            report.mapped.append(
                {
                    "checkpoint": name,
                    "shape": list(tensor.shape),
                    "targets": targets[name],
                }
            )
        else:
            report.unused.append({"checkpoint": name, "shape": list(tensor.shape)})
    for source, where in targets.items():
        if source not in state:
            report.mapped.append({"checkpoint": source, "shape": None, "targets": where})
    if not report.ok:
        first = (report.missing or report.mismatched)[0]
        raise WeightMappingError(report, first)
    for model in graphs.models.values():
        fold_after_weights(model)
    return report


class WeightMappingError(MmforgeError):
    """A conversion stopped by missing weights or shape mismatches; carries the report."""

    def __init__(self, report: WeightReport, first: dict[str, Any]):
        counts = report.summary()
        what = (
            f"{counts['missing']} graph weights have no checkpoint tensor"
            if report.missing
            else f"{counts['shape_mismatch']} weights have the wrong shape"
        )
        super().__init__(
            f"The checkpoint does not fit the graphs: {what} (first: {first})",
            "The checkpoint's layout is not supported yet; see weights_report.json",
        )
        self.report = report


def _shape(shape: Any) -> list[int] | None:
    if shape is None:
        return None
    return [int(d) if isinstance(d, int) else str(d) for d in shape]  # type: ignore[misc]
