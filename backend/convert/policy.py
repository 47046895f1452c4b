"""The precision policy: which precision each component is stored in, kept right by a probe.

- f32 packages: every component float32.
- f16 packages: every component float16, then a probe run on the probe inputs; an encoder
  whose activations overflow float16 (or come near its limit) is written again in
  float32 and named; a decoder whose logits are not finite is refused.
- int4 / int8 packages: the decoder's matrices quantized (quantize.py); the encoders in
  float16 where the probe run shows it safe (else float32, named), their inputs and
  outputs float32 with a Cast inside; the embedding table quantized like the decoder
  (GatherBlockQuantized, same bits and blocks), which ONNX Runtime 1.32's CPU EP runs.

An f16 graph that overflows shows it as inf or NaN in an activation, so the probe runs
the written f16 encoder with every intermediate value exposed, where the runtime would
otherwise hand NaN features to the decoder and print `<pad>` forever.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmforge.backend import precisions
from mmforge.backend.errors import MmforgeError
from mmforge.backend.jobs import JobContext
from mmforge.backend.untrusted import read_json_object
from mmforge.backend.vocabulary import GENAI_SECTIONS

if TYPE_CHECKING:
    from mmforge.backend.checkpoint import Checkpoint
    from mmforge.backend.families import BuiltGraphs

log = logging.getLogger(__name__)

F16_MAX = 65504.0
# An activation above this share of f16's limit on the probe is too close: other images
# or sounds can go further.
F16_HEADROOM = 0.25
ENCODERS = ("vision_encoder", "audio_encoder")
ENCODER_SECTIONS = {
    "vision_encoder": (GENAI_SECTIONS["vision_encoder"], "image"),
    "audio_encoder": (GENAI_SECTIONS["audio_encoder"], "audio"),
}
ENCODER_CHOICES = ("auto", "f32")


@dataclasses.dataclass
class Policy:
    """The precisions chosen for one conversion, and how to go back to float32.

    Attributes:
        dtype: The package's precision.
        precisions: Component to what it is stored in (written into the manifest).
        fallbacks: Encoders stored in f16: a maker of their float32 graph, for when the
            probe finds f16 unsafe.
        notes: What the policy decided, for the manifest and the convert output.
    """

    dtype: str
    precisions: dict[str, str]
    fallbacks: dict[str, Callable[[], Any]] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)


def choose(
    checkpoint: Checkpoint,
    dtype: str,
    graphs: BuiltGraphs,
    rebuild: Callable[[str], BuiltGraphs],
    encoders: str = "auto",
) -> Policy:
    """Pick each component's precision; swap in f16 encoder graphs for int4/int8.

    Args:
        checkpoint: The checkpoint.
        dtype: The package's precision.
        graphs: The graphs as built for `dtype` (int4/int8: float32); edited in place.
        rebuild: Builds the graphs again in another float precision ("f16", "f32").
        encoders: "auto" (f16 where safe in f16, int4 and int8 packages) or "f32".
    """
    refuse_unknown(encoders)
    quantized = precisions.is_quantized(dtype)
    chosen = {c: precisions.graph_dtype(dtype) for c in graphs.models}
    if quantized:
        chosen["decoder"] = dtype
        if "embedding" in chosen:
            chosen["embedding"] = dtype
    policy = Policy(dtype, chosen)
    present = [c for c in ENCODERS if c in graphs.models and c not in graphs.baked]
    spec = checkpoint.family.package
    f16_builds = spec is not None and spec.build is None and "f16" in spec.dtypes
    if not present or dtype == "f32":
        return policy
    if dtype == "f16":
        for component in present:
            policy.fallbacks[component] = _rebuilt(rebuild, "f32", component, "f16")
        if encoders == "f32":
            policy.notes.append("encoders kept in f32 as asked (--encoders f32)")
            for component in present:
                graphs.models[component] = policy.fallbacks.pop(component)()
                chosen[component] = "f32"
        return policy
    if encoders == "f32" or not f16_builds:
        if encoders == "f32":
            policy.notes.append("encoders kept in f32 as asked (--encoders f32)")
        return policy
    half = rebuild("f16")
    for component in present:
        candidate = half.models.get(component)
        original = graphs.models[component]
        if candidate is None or _weight_names(candidate) != _weight_names(original):
            policy.notes.append(f"{component} kept in f32: its f16 graph holds other weights")
            continue
        cast_outputs(candidate, "f32")
        graphs.models[component] = candidate
        policy.fallbacks[component] = _kept(original)
        chosen[component] = "f16"
    return policy


def _kept(model: Any) -> Callable[[], Any]:
    return lambda: model


def _rebuilt(
    rebuild: Callable[[str], BuiltGraphs], dtype: str, component: str, outputs: str
) -> Callable[[], Any]:
    def make() -> Any:
        model = rebuild(dtype).models[component]
        cast_outputs(model, outputs)
        return model

    return make


def _weight_names(model: Any) -> dict[str, tuple[Any, ...]]:
    return {
        name: tuple(value.shape or ())
        for name, value in model.graph.initializers.items()
        if value.const_value is None
    }


def cast_outputs(model: Any, to: str) -> list[str]:
    """Give every floating output of a graph the type `to` ("f32" or "f16"), by a Cast."""
    import onnx_ir as ir

    target = ir.DataType.FLOAT if to == "f32" else ir.DataType.FLOAT16
    floats = {ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16}
    graph = model.graph
    changed = []
    for position, old in enumerate(list(graph.outputs)):
        if old.dtype not in floats or old.dtype == target:
            continue
        name = old.name
        old.name = f"{name}_{old.dtype.name.lower()}_out"
        cast = ir.node("Cast", inputs=[old], attributes={"to": target}, name=f"{name}_cast")
        out = cast.outputs[0]
        out.name, out.dtype, out.shape = name, target, old.shape
        graph.append(cast)
        graph.outputs[position] = out
        changed.append(name)
    return changed


def compact_embedding(model: Any, bits: int) -> Any:
    """The embedding graph with its token table quantized: GatherBlockQuantized.

    Each Gather of a 2-D float32 initializer on axis 0 becomes a GatherBlockQuantized with
    the decoder's blocks (symmetric, `bits` bits, block 32 along the hidden axis, one
    float32 scale per block), quantized by the same kernel as the decoder's MatMulNBits
    as the writer reaches it. A table whose width is not a multiple of 32 stays float32.
    """
    import onnx_ir as ir

    from mmforge.backend.convert.quantize import _Quantized

    graph = model.graph
    block = precisions.BLOCK_SIZE
    for node in list(graph):
        if node.op_type != "Gather" or node.domain not in ("", "ai.onnx"):
            continue
        table = node.inputs[0]
        axis = node.attributes.get("axis")
        if table is None or table.const_value is None or table.name not in graph.initializers:
            continue
        shape = table.const_value.shape
        if (axis is not None and axis.as_int() != 0) or len(shape) != 2:
            continue
        rows, width = int(shape[0]), int(shape[1])
        if table.const_value.dtype != ir.DataType.FLOAT or width % block:
            continue
        # The quantizer takes a MatMul weight [K, N]: the table's transpose, so its N rows
        # are the tokens and its blocks run along the hidden axis, as GatherBlockQuantized
        # reads them.
        source = _Quantized(_Transposed(table.const_value), width, rows, width // block, bits)
        per_byte = 8 // bits
        data = _lazy(
            graph,
            f"{table.name}_Q{bits}",
            _reshaped(source.packed, [rows, width // per_byte]),
            ir.DataType.UINT8,
            [rows, width // per_byte],
        )
        scales = _lazy(
            graph, f"{table.name}_scales", source.scales, ir.DataType.FLOAT, [rows, width // block]
        )
        replacement = ir.node(
            "GatherBlockQuantized",
            inputs=[data, node.inputs[1], scales],
            attributes={"gather_axis": 0, "quantize_axis": 1, "block_size": block, "bits": bits},
            domain="com.microsoft",
            name=f"{node.name}_Q{bits}" if node.name else None,
        )
        graph.insert_before(node, replacement)
        node.outputs[0].replace_all_uses_with(replacement.outputs[0], replace_graph_outputs=True)
        replacement.outputs[0].name = node.outputs[0].name
        replacement.outputs[0].dtype = ir.DataType.FLOAT
        graph.remove(node, safe=True)
        if not table.uses():
            del graph.initializers[table.name]
    model.opset_imports.setdefault("com.microsoft", 1)
    return model


def _reshaped(make: Callable[[], Any], shape: list[int]) -> Callable[[], Any]:
    return lambda: make().reshape(shape)


class _Transposed:
    """A lazy tensor seen as its transpose (numpy view, no copy)."""

    def __init__(self, tensor: Any):
        self.tensor = tensor

    def numpy(self) -> Any:
        return self.tensor.numpy().T


def _lazy(graph: Any, name: str, make: Callable[[], Any], dtype: Any, shape: list[int]) -> Any:
    import onnx_ir as ir

    value = ir.Value(
        name=name,
        shape=ir.Shape(shape),
        type=ir.TensorType(dtype),
        const_value=ir.LazyTensor(
            lambda: ir.tensor(make(), name=name), dtype=dtype, shape=ir.Shape(shape), name=name
        ),
    )
    graph.register_initializer(value)
    return value


@dataclasses.dataclass(frozen=True)
class Probe:
    """One component's probe run.

    Attributes:
        component: The component.
        largest: The largest activation magnitude seen (inf when one overflowed).
        finite: Whether every activation was finite.
    """

    component: str
    largest: float
    finite: bool

    @property
    def safe(self) -> bool:
        """Finite, and within the headroom below f16's limit."""
        return self.finite and self.largest <= F16_MAX * F16_HEADROOM


def probe_and_settle(
    staging: Path,
    policy: Policy,
    rewrite: Callable[[str, Any], dict[str, int]],
    ctx: JobContext,
    ep: str = "cpu",
) -> dict[str, int]:
    """Run each f16 component on the probe inputs; rewrite in f32 what is not safe.

    The probe runs the package where it is meant to run: a CUDA package's graphs may hold
    kernels only CUDA has (the Qwen vision towers' PackedMultiHeadAttention). Without
    CUDA here, nothing shows f16 safe: the encoders are written in f32, and the manifest
    says why.

    Args:
        staging: The package written so far (every file the runtime reads).
        policy: The precisions chosen; updated with what the probe decided.
        rewrite: Writes a component's float32 graph (weights applied) in place of its f16
            one; returns the files written.
        ctx: Progress.
        ep: The execution provider the package is made for.

    Returns:
        The files rewritten, with their sizes.

    Raises:
        MmforgeError: An f16 decoder (or embedding) whose logits are not finite on the
            probe prompt: the package would print nothing useful.
    """
    f16 = [c for c in ENCODERS if policy.precisions.get(c) == "f16"]
    written: dict[str, int] = {}
    if not f16 and policy.dtype != "f16":
        return written
    if not _runs_here(ep):
        for component in f16:
            policy.notes.append(
                f"{component} kept in f32: f16 is shown safe by running the package, and "
                f"this machine cannot run a {ep.upper()} package"
            )
            log.warning("%s", policy.notes[-1])
            written.update(rewrite(component, policy.fallbacks[component]()))
            policy.precisions[component] = "f32"
        if policy.dtype == "f16":
            policy.notes.append(
                f"f16 logits not checked: this machine cannot run a {ep.upper()} package"
            )
        return written
    ctx.report("probe", 0, 1, message="probe run of the f16 components", force=True)
    arrays = _probe_arrays(staging, [c for c in f16 if c in policy.precisions], ep)
    for component in f16:
        result = probe_encoder(staging, component, arrays, ep)
        if result.safe:
            continue
        seen = "inf or NaN" if not result.finite else f"{result.largest:.3g}"
        policy.notes.append(
            f"{component} kept in f32: in f16 its activations reach {seen} on the probe input "
            f"(f16 holds at most {F16_MAX:.0f}; kept below {F16_MAX * F16_HEADROOM:.0f})"
        )
        log.warning("%s", policy.notes[-1])
        written.update(rewrite(component, policy.fallbacks[component]()))
        policy.precisions[component] = "f32"
    if policy.dtype == "f16":
        _check_logits(staging, ep)
    ctx.report("probe", 1, 1, message="f16 components checked")
    return written


def _runs_here(ep: str) -> bool:
    """Whether this machine runs a package made for `ep`."""
    if ep == "cpu":
        return True
    import onnxruntime_genai as og

    return ep == "cuda" and bool(og.is_cuda_available())


def _probe_arrays(staging: Path, encoders: list[str], ep: str = "cpu") -> dict[str, Any]:
    """The runtime processor's output for the probe image and clip."""
    from mmforge import resources
    from mmforge.backend.runtime import Runtime

    if not encoders:
        return {}
    runtime = Runtime(staging, ep)
    images = [resources.probe_image()] if "vision_encoder" in encoders else []
    audios = [resources.probe_audio()] if "audio_encoder" in encoders else []
    content: list[dict[str, str]] = [{"type": "image"} for _ in images]
    content += [{"type": "audio"} for _ in audios]
    content.append({"type": "text", "text": "Describe this."})
    prompt = runtime.prompt([{"role": "user", "content": content}])
    return dict(runtime.process(prompt, images, audios).arrays)


def probe_encoder(package: Path, component: str, arrays: dict[str, Any], ep: str = "cpu") -> Probe:
    """Run an encoder graph on the processor's arrays with every activation exposed."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from mmforge.backend.convert.package import ONNX_FILES

    section, prefix = ENCODER_SECTIONS[component]
    model_cfg = read_json_object(package / "genai_config.json", "package")["model"]
    mapping = model_cfg.get(section, {}).get("inputs", {})
    path = package / ONNX_FILES[component]
    graph = onnx.load(str(path), load_external_data=False)
    known = {o.name for o in graph.graph.output}
    graph_outputs = list(known)
    for node in graph.graph.node:
        for name in node.output:
            if name and name not in known:
                graph.graph.output.append(onnx.ValueInfoProto(name=name))
                known.add(name)
    exposed = path.with_name(f".probe-{path.name}")  # beside its external data
    onnx.save(graph, str(exposed))
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4
        providers = ["CPUExecutionProvider"]
        if ep == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        session = ort.InferenceSession(str(exposed), options, providers=providers)
        feeds = {}
        for spec in session.get_inputs():
            key = next((k for k, v in mapping.items() if v == spec.name), spec.name)
            for candidate in (key, spec.name, f"{prefix}_{key}"):
                if candidate in arrays:
                    wanted = "float32" if "float" in spec.type else None
                    feeds[spec.name] = np.asarray(arrays[candidate])
                    if wanted and feeds[spec.name].dtype.kind == "f":
                        feeds[spec.name] = feeds[spec.name].astype(wanted)
                    elif spec.type == "tensor(int64)":
                        feeds[spec.name] = feeds[spec.name].astype(np.int64)
                    break
        outputs = session.run(None, feeds)
    finally:
        exposed.unlink(missing_ok=True)
    # An attention mask holds -inf (or f16's lowest value) by design; an overflow shows as
    # NaN downstream (inf - inf, inf · 0, a softmax over inf) or as a non-finite output.
    finals = {o.name for o in session.get_outputs()[: len(graph_outputs)]}
    largest, finite = 0.0, True
    for spec, value in zip(session.get_outputs(), outputs, strict=True):
        array = np.asarray(value)
        if array.dtype.kind != "f" or not array.size:
            continue
        values = np.abs(array.astype(np.float32))
        if np.isnan(values).any() or (spec.name in finals and not np.isfinite(values).all()):
            finite, largest = False, float("inf")
            continue
        below = values[values < F16_MAX]
        if below.size:
            largest = max(largest, float(below.max()))
    return Probe(component, largest, finite)


def _check_logits(staging: Path, ep: str = "cpu") -> None:
    """Refuse an f16 package whose first logits on the probe prompt are not finite."""
    import numpy as np

    from mmforge import resources
    from mmforge.backend.runtime import Runtime

    runtime = Runtime(staging, ep)
    images = [resources.probe_image()] if (staging / "vision.onnx").exists() else []
    content: list[dict[str, str]] = [{"type": "image"} for _ in images]
    content.append({"type": "text", "text": "Describe this."})
    inputs = runtime.process(runtime.prompt([{"role": "user", "content": content}]), images)
    og = runtime.og
    params = og.GeneratorParams(runtime.model)
    params.set_search_options(max_length=len(inputs.input_ids) + 1, do_sample=False)
    generator = og.Generator(runtime.model, params)
    if inputs.named is not None:
        generator.set_inputs(inputs.named)
    else:
        generator.append_tokens(inputs.arrays["input_ids"])
    generator.generate_next_token()
    logits = np.asarray(generator.get_output("logits"), dtype=np.float32)
    if not np.isfinite(logits).all():
        raise MmforgeError(
            "The f16 package's decoder overflows float16 on the probe prompt: its logits are "
            "inf or NaN, so it would print nothing useful",
            "Convert at int4, int8 or f32 instead: they compute the decoder in float32",
        )


def refuse_unknown(encoders: str) -> None:
    """Raise for an encoder choice that is not one of ENCODER_CHOICES."""
    if encoders not in ENCODER_CHOICES:
        raise MmforgeError(
            f"Unknown encoder precision '{encoders}'", f"Choose one of {', '.join(ENCODER_CHOICES)}"
        )
