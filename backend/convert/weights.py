"""Applying checkpoint weights to the graphs, with a weight-mapping report.

Every checkpoint tensor ends up mapped (to one or more initializers), unused (only where
transformers never runs it either), or in a shape mismatch; every graph initializer
without a value is missing, and so is a checkpoint tensor with no place in the graphs.
Either, or a shape mismatch, is a conversion error, not a warning: the package would
compute something other than the model.

The plan is made from the safetensors headers alone (names, shapes, dtypes). Tensors are
then read one component at a time, so peak memory follows the largest component rather
than the whole checkpoint.
"""

from __future__ import annotations

import json
import logging
import re
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from mmforge.backend.convert.graphs import fold_after_weights
from mmforge.backend.errors import MmforgeError
from mmforge.backend.families import BuiltGraphs
from mmforge.backend.jobs import JobContext
from mmforge.backend.tensors import TensorRef

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


@dataclass
class WeightPlan:
    """Which checkpoint tensor feeds which initializer, per component."""

    report: WeightReport
    assignments: dict[str, list[tuple[str, TensorRef]]]
    baked_refs: dict[str, TensorRef] = field(default_factory=dict)


class WeightMappingError(MmforgeError):
    """A conversion stopped by missing weights or shape mismatches; carries the report."""

    def __init__(self, report: WeightReport):
        counts = report.summary()
        if report.mismatched:
            # The graphs are built from config.json, so a shape that differs is a config
            # and weights that disagree, unless mmforge sizes this layout wrongly.
            first = report.mismatched[0]
            message = (
                f"The checkpoint's weights do not have the shapes its config.json gives: "
                f"{first['checkpoint']} is {_dims(first['actual'])} in the checkpoint, the "
                f"config makes it {_dims(first['expected'])}"
                + _more(counts["shape_mismatch"], "weights differ")
            )
            hint = (
                "config.json and the weights come from different models or versions: "
                "download the model again. If they came together, mmforge sizes this "
                "layout wrongly: report it with the details"
            )
        else:
            first = report.missing[0]
            unplaced = first["component"] == _NO_PLACE
            message = (
                f"The checkpoint does not fit the graphs: its tensor {first['initializer']} "
                f"{_dims(first['shape'])} has no place in them"
                if unplaced
                else f"The checkpoint does not fit the graphs: they need "
                f"{first['initializer']} {_dims(first['shape'])}, which it does not have"
            ) + _more(counts["missing"], "tensors do not fit")
            hint = "This checkpoint's layout is not supported yet"
        super().__init__(message, hint, details=json.dumps(report.summary()))
        self.report = report


_NO_PLACE = "(no place in the built graphs)"


def _dims(shape: Any) -> str:
    return "[" + ", ".join(str(d) for d in shape or ()) + "]"


def _more(count: int, what: str) -> str:
    return f" ({count} {what} in all)" if count > 1 else ""


def plan_weights(
    graphs: BuiltGraphs,
    refs: dict[str, TensorRef],
    normalise: Callable[[str], str] | None = None,
    unused_ok: tuple[str, ...] = (),
) -> WeightPlan:
    """Route checkpoint tensors to graph initializers and report the mapping.

    Args:
        graphs: The built graphs.
        refs: Checkpoint tensors by name.
        normalise: The family's checkpoint-name normalisation, applied before the graph
            builder's own renames (the report keeps the original names).
        unused_ok: Patterns (regular expressions, searched in the name) of tensors that
            transformers holds but never computes with for this config; any other tensor
            no graph uses is an error, since it means a part of the model (a bias, a
            norm, a layer) the graphs dropped.

    Raises:
        WeightMappingError: A graph initializer has no weight, shapes disagree, or a
            checkpoint tensor the model computes with has no place in the graphs.
    """
    named = {normalise(n) if normalise else n: r for n, r in refs.items()}
    try:
        renamed = graphs.rename_weights(named)
    except (TypeError, AttributeError, RuntimeError) as e:
        raise MmforgeError(
            "The graph builder transforms this checkpoint's tensors instead of renaming them",
            "This layout is not supported yet",
            details=repr(e),
        ) from e
    report = WeightReport()
    assignments: dict[str, list[tuple[str, TensorRef]]] = {}
    targets: dict[str, list[str]] = {}
    for component, model in graphs.models.items():
        if component in graphs.baked:
            _plan_baked(component, model, graphs.baked[component], named, report, targets)
            continue
        for init_name, value in model.graph.initializers.items():
            ref = renamed.get(init_name)
            if not isinstance(ref, TensorRef):
                if value.const_value is None:
                    report.missing.append(
                        {
                            "component": component,
                            "initializer": init_name,
                            "shape": _shape(value.shape),
                        }
                    )
                continue
            expected = _shape(value.shape)
            if expected is not None and expected != list(ref.shape):
                report.mismatched.append(
                    {
                        "checkpoint": ref.name,
                        "component": component,
                        "initializer": init_name,
                        "expected": expected,
                        "actual": list(ref.shape),
                    }
                )
                continue
            assignments.setdefault(component, []).append((init_name, ref))
            targets.setdefault(ref.name, []).append(f"{component}/{init_name}")
    misshapen = {m["checkpoint"] for m in report.mismatched}
    for name, ref in refs.items():
        if name in misshapen:
            continue  # it has a place, with another shape: reported as mismatched
        if name in targets:
            report.mapped.append(
                {"checkpoint": name, "shape": list(ref.shape), "targets": targets[name]}
            )
        elif any(re.search(p, name) for p in unused_ok):
            report.unused.append({"checkpoint": name, "shape": list(ref.shape)})
        else:
            report.missing.append(
                {"component": _NO_PLACE, "initializer": name, "shape": list(ref.shape)}
            )
    if not report.ok:
        raise WeightMappingError(report)
    return WeightPlan(report=report, assignments=assignments, baked_refs=named)


# How a weight a builder wrote itself is made from checkpoint tensors (BuiltGraphs.baked):
# "same" equal as is, "t" transposed (MatMul weights), "qkv" q, k and v stacked then
# transposed (fused attention projections), "computed" from no tensor (rotary tables).
BAKED_KINDS = ("same", "t", "qkv", "computed")


def _baked_shape(shapes: list[list[int]], how: str) -> list[int]:
    """The shape of a baked weight made from checkpoint tensors of `shapes`."""
    if how == "same":
        return list(shapes[0])
    if how == "t":
        return list(reversed(shapes[0]))
    return [shapes[0][1], sum(s[0] for s in shapes)]  # qkv


def _baked_value(tensors: list[Any], how: str) -> Any:
    """A baked weight's expected value from its checkpoint tensors (torch)."""
    import torch

    if how == "same":
        return tensors[0]
    if how == "t":
        return tensors[0].T
    return torch.cat(tensors, 0).T  # qkv


def _plan_baked(
    component: str,
    model: Any,
    sources: dict[str, tuple[tuple[str, ...], str]],
    refs: dict[str, TensorRef],
    report: WeightReport,
    targets: dict[str, list[str]],
) -> None:
    """Account for weights a builder wrote itself.

    Each must come from checkpoint tensors of the right shapes; its values are compared
    when the component is written (check_baked).
    """
    for init_name, value in model.graph.initializers.items():
        source = sources.get(init_name)
        if not value.dtype.is_floating_point() or (source and source[1] == "computed"):
            continue
        if source is None or any(name not in refs for name in source[0]):
            report.missing.append(
                {"component": component, "initializer": init_name, "shape": _shape(value.shape)}
            )
            continue
        names, how = source
        expected = _shape(value.shape)
        actual = _baked_shape([list(refs[n].shape) for n in names], how)
        if expected is not None and expected != actual:
            report.mismatched.append(
                {
                    "checkpoint": "+".join(refs[n].name for n in names),
                    "component": component,
                    "initializer": init_name,
                    "expected": expected,
                    "actual": actual,
                }
            )
            continue
        for n in names:
            targets.setdefault(refs[n].name, []).append(f"{component}/{init_name}")


def check_baked(graphs: BuiltGraphs, component: str, plan: WeightPlan, ctx: JobContext) -> None:
    """Compare every weight a builder wrote with the checkpoint tensors it stands for.

    Raises:
        MmforgeError: A value differs (the builder read other weights than ours).
    """
    import torch

    sources = graphs.baked.get(component, {})
    model = graphs.models[component]
    todo = [
        (n, v)
        for n, v in model.graph.initializers.items()
        if n in sources and sources[n][1] != "computed"
    ]
    for done, (init_name, value) in enumerate(todo, start=1):
        names, how = sources[init_name]
        expected = _baked_value([plan.baked_refs[n].read().float() for n in names], how)
        actual = torch.tensor(value.const_value.numpy(), dtype=torch.float32)
        if actual.shape != expected.shape or not torch.equal(actual, expected):
            diff = (
                (actual - expected).abs().max().item() if actual.shape == expected.shape else None
            )
            raise MmforgeError(
                f"The {component} builder's {init_name} differs from the checkpoint's "
                f"{' + '.join(names)} (max difference {diff})",
                "The ONNX Runtime GenAI builder read other weights; this layout is not supported",
            )
        ctx.report(
            "weights", done, len(todo), unit="tensors", message=f"{component}: checked {init_name}"
        )


def apply_component(graphs: BuiltGraphs, component: str, plan: WeightPlan, ctx: JobContext) -> None:
    """Attach one component's weights as lazy tensors and fold the graph.

    No tensor data is read here: each initializer gets a LazyTensor that reads its
    tensor from the safetensors file when the component is written, so only one tensor
    at a time is in memory.
    """
    import onnx_ir as ir

    model = graphs.models[component]
    todo = plan.assignments.get(component, [])
    first: dict[int, Any] = {}
    for done, (init_name, ref) in enumerate(todo, start=1):
        value = model.graph.initializers[init_name]
        shared = first.get(id(ref))
        if shared is not None and shared.dtype == value.dtype:
            # Tied weights (embedding and LM head): one initializer, two uses.
            value.replace_all_uses_with(shared)
            del model.graph.initializers[init_name]
            continue
        first[id(ref)] = value
        value.const_value = ir.LazyTensor(
            _loader(ref, value.dtype, init_name),
            dtype=value.dtype,
            shape=ir.Shape(list(ref.shape)),
            name=init_name,
        )
        ctx.report("weights", done, len(todo), unit="tensors", message=f"{component}: {ref.name}")
    fold_after_weights(model)
    _contiguous_on_write(model)


def _loader(ref: TensorRef, dtype: Any, init_name: str) -> Callable[[], Any]:
    """Read one tensor, in the initializer's dtype, when the writer asks for it."""

    def load() -> Any:
        from onnx_ir import tensor_adapters

        try:
            tensor = ref.read()
        except (OSError, ValueError) as e:
            raise MmforgeError(
                f"{ref.file.name} could not be read ({e})",
                "The file is corrupt: delete it and download the model again",
            ) from e
        import torch

        target = tensor_adapters.to_torch_dtype(dtype)
        # Cast and lay out in one pass: a transposed weight is not copied twice.
        tensor = tensor.to(target, memory_format=torch.contiguous_format)
        return tensor_adapters.TorchTensor(tensor.contiguous(), init_name)

    return load


def _contiguous_on_write(model: Any) -> None:
    """Make lazily transposed weights contiguous before they are written.

    mobius folds Transpose(weight) into a lazy `.T` view; numpy writes a non-contiguous
    array element by element (about 5x slower than a contiguous copy plus write). torch
    makes the copy about 4x faster than numpy (blocked and multi-threaded).
    """
    import onnx_ir as ir

    def contiguous(tensor: Any) -> Any:
        import torch

        array = tensor.numpy()
        if not array.flags.c_contiguous:
            array = torch.from_numpy(array).contiguous().numpy()
        return ir.tensor(array, name=tensor.name)

    for value in model.graph.initializers.values():
        tensor = value.const_value
        if isinstance(tensor, ir.LazyTensor):
            value.const_value = ir.LazyTensor(
                lambda t=tensor: contiguous(t),
                dtype=tensor.dtype,
                shape=tensor.shape,
                name=tensor.name,
            )
            _UNCOPIED[value.const_value] = tensor


# Each contiguous-on-write tensor's source, which may be a lazily transposed view: the
# quantizer reads it column block by column block instead of copying it whole (for a
# 248k-token output layer that copy alone is 2 GB).
_UNCOPIED: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def uncopied(tensor: Any) -> Any:
    """The tensor a contiguous-on-write tensor copies (itself for any other tensor)."""
    try:
        return _UNCOPIED.get(tensor, tensor)
    except TypeError:  # not weak-referenceable: not one of ours
        return tensor


def _shape(shape: Any) -> list[int] | None:
    if shape is None:
        return None
    return [int(d) if isinstance(d, int) else str(d) for d in shape]  # type: ignore[misc]
