"""Graph building: mobius-onnx as the engine, behind this one module.

mobius builds numerically right graphs for several families. Everything around it is
ours: the config normalisation before the build, the weight application with its report,
and the whole ONNX Runtime GenAI packaging. Only this module drives mobius; a family's
adaptations of it (`PackageSpec.config_patch`, `module_patch`) live in the family's
folder. A family that mobius does not know brings its own builder (`PackageSpec.build`,
LFM2-VL's in families/lfm2/build.py).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmforge.backend.errors import LayoutError, MmforgeError
from mmforge.backend.families import COMPONENT_NAMES, BuildRequest, BuiltGraphs, quiet_library
from mmforge.backend.jobs import JobContext
from mmforge.backend.precisions import graph_dtype

if TYPE_CHECKING:
    from mmforge.backend.checkpoint import Checkpoint

log = logging.getLogger(__name__)


def build_graphs(
    checkpoint: Checkpoint,
    dtype: str,
    ep: str,
    *,
    work: Path | None = None,
    ctx: JobContext | None = None,
) -> BuiltGraphs:
    """Build the component graphs of a checkpoint, without weights.

    Families with a builder of their own (`PackageSpec.build`) use it; the others are
    built by mobius.

    Args:
        checkpoint: The checkpoint.
        dtype: A precision (int4 and int8 build f32; the decoder is quantized later).
        ep: "cpu" or "cuda" steer mobius's EP-specific fusions; "default" builds the
            portable graph without them.
        work: A scratch folder for builders that write files (LFM2-VL's decoder).
        ctx: Progress and cancel for builders that run for long.

    Raises:
        MmforgeError: mobius does not know the model type, or its build failed.
    """
    spec = checkpoint.family.package
    if spec is not None and spec.build is not None:
        if work is None:
            raise LayoutError(f"The {checkpoint.family.name} build needs a scratch folder")
        return spec.build(BuildRequest(checkpoint, work, ctx or JobContext()))
    return _build_with_mobius(checkpoint, dtype, ep)


def _build_with_mobius(checkpoint: Checkpoint, dtype: str, ep: str) -> BuiltGraphs:
    family = checkpoint.family
    with quiet_library():
        from mobius._builder import build_from_module, resolve_dtype
        from mobius._config_resolver import _config_from_hf, _default_task_for_model
        from mobius._registry import registry

    hf_config = checkpoint.transformers_config()
    spec = family.package
    if spec is not None and spec.config_patch is not None:
        spec.config_patch(hf_config)
    # The graphs tie the output layer as transformers does: by what the checkpoint holds.
    tied = checkpoint.output_tied
    hf_config.tie_word_embeddings = tied
    if getattr(hf_config, "text_config", None) is not None:
        hf_config.text_config.tie_word_embeddings = tied
    model_type = (spec.builder_type(checkpoint.cfg) if spec is not None else None) or (
        hf_config.model_type
    )
    if model_type not in registry:
        raise MmforgeError(
            f"The graph builder (mobius) has no {family.name} model ({model_type})",
            "This family cannot be converted yet",
        )
    module_class = registry.get(model_type)
    text_config = getattr(hf_config, "text_config", None) or hf_config
    config = _config_from_hf(text_config, parent_config=hf_config, module_class=module_class)
    config = dataclasses.replace(config, dtype=resolve_dtype(graph_dtype(dtype)))
    task = _default_task_for_model(model_type)
    try:
        with quiet_library():
            module = module_class(config)
            if spec is not None and spec.module_patch is not None:
                spec.module_patch(module, hf_config)
            package = build_from_module(module, config, task, execution_provider=ep)
    except Exception as e:
        raise MmforgeError(
            f"Building the {family.name} graphs failed: {type(e).__name__}: {e}",
            "This checkpoint's configuration is not supported yet",
        ) from e
    models = {name: package[name] for name in package}
    unknown = set(models) - set(COMPONENT_NAMES)
    if unknown:
        raise LayoutError(f"Unexpected components from the graph builder: {sorted(unknown)}")
    ensure_f32_encoder_inputs(models)
    return BuiltGraphs(models=models, module=module)


ENCODERS = ("vision_encoder", "audio_encoder")


def ensure_f32_encoder_inputs(models: dict[str, Any]) -> list[str]:
    """Give every floating encoder input the float32 type, with a Cast inside the graph.

    Preprocessing produces float32 in every runtime (PIL, ORT GenAI processors, audio
    front-ends), so encoders take float32 whatever their weights' dtype (seed rule).
    mobius 0.1 declares f16 inputs on f16 builds; this rewrites them.

    Returns:
        "component/input" for each input that was rewritten.
    """
    import onnx_ir as ir

    low = {ir.DataType.FLOAT16, ir.DataType.BFLOAT16}
    changed = []
    for component in ENCODERS:
        model = models.get(component)
        if model is None:
            continue
        graph = model.graph
        for position, old in enumerate(list(graph.inputs)):
            if old.dtype not in low:
                continue
            name = old.name
            old.name = f"{name}_{old.dtype.name.lower()}_in"
            new = ir.Value(name=name, type=ir.TensorType(ir.DataType.FLOAT), shape=old.shape)
            cast = ir.node("Cast", inputs=[new], attributes={"to": old.dtype}, name=f"{name}_cast")
            old.replace_all_uses_with(cast.outputs[0])
            cast.outputs[0].name = f"{name}_{old.dtype.name.lower()}"
            cast.outputs[0].dtype = old.dtype
            cast.outputs[0].shape = old.shape
            graph.inputs[position] = new
            graph.insert_before(graph.node(0), cast)
            changed.append(f"{component}/{name}")
    return changed


# What torch computes in float32 inside a float16 model, and ONNX Runtime's CPU kernels
# in the tensors' own type: the normalisations, and the Gated DeltaNet recurrence
# (transformers casts q, k, v and the state to float32 for it; the releases say
# `mamba_ssm_dtype: float32`).
_IN_FLOAT32 = frozenset(
    {
        "RMSNormalization",
        "SimplifiedLayerNormalization",
        "SkipSimplifiedLayerNormalization",
        "LayerNormalization",
        "SkipLayerNormalization",
        "LinearAttention",
    }
)


def float32_islands(model: Any) -> int:
    """Compute the ops torch keeps in float32 in float32 in an f16 graph, between Casts.

    Measured on the release-shaped checkpoints against transformers: the Qwen3.6 MoE f16
    decoder's logits went from cosine 0.965 (FAIL) to 0.99994 with float32 norms; the
    Qwen3.5-0.8B one's largest logit difference from 0.162 to 0.079 with the DeltaNet
    recurrence in float32 too. The matmuls stay float16; of the state carried between
    steps, the DeltaNet recurrent state is float32 (`float32_recurrent_state`), as in
    transformers' cache, and the KV cache and convolution state stay float16.

    Returns:
        How many nodes now compute in float32 (0 for a graph without float16 ones).
    """
    import onnx_ir as ir

    graph = model.graph
    changed = 0
    for node in list(graph):
        if node.op_type not in _IN_FLOAT32 or not any(
            v is not None and v.dtype == ir.DataType.FLOAT16 for v in node.inputs
        ):
            continue
        changed += 1
        for i, value in enumerate(node.inputs):
            # These ops' float inputs share one type: an input of no recorded type (a
            # node a fix added) is float16 too.
            if value is None or value.dtype not in (ir.DataType.FLOAT16, None):
                continue
            up = ir.node(
                "Cast",
                inputs=[value],
                attributes={"to": ir.DataType.FLOAT},
                name=f"{node.name}_in{i}_f32",
            )
            up.outputs[0].dtype, up.outputs[0].shape = ir.DataType.FLOAT, value.shape
            graph.insert_before(node, up)
            node.replace_input_with(i, up.outputs[0])
        for i, value in enumerate(node.outputs):
            # An output's type follows the inputs' unless recorded otherwise (mean and
            # inverse deviation outputs are float32 anyway).
            low = value.dtype in (ir.DataType.FLOAT16, None) and bool(value.name)
            if not low or not (value.uses() or value.is_graph_output()):
                if low:
                    value.dtype = ir.DataType.FLOAT  # unused: its type follows the node's
                continue
            down = ir.node(
                "Cast",
                inputs=[ir.Value(name=f"{value.name}_f32")],
                attributes={"to": ir.DataType.FLOAT16},
                name=f"{node.name}_out{i}_f16",
            )
            graph.insert_after(node, down)
            value.replace_all_uses_with(down.outputs[0], replace_graph_outputs=True)
            # The node's output keeps its object (now float32); the Cast takes its name.
            name = value.name
            value.name = f"{name}_f32"
            value.dtype = ir.DataType.FLOAT
            down.replace_input_with(0, value)
            down.outputs[0].name = name
            down.outputs[0].dtype, down.outputs[0].shape = ir.DataType.FLOAT16, value.shape
    return changed


def float32_recurrent_state(model: Any) -> int:
    """Carry the Gated DeltaNet recurrent state between steps in float32.

    transformers keeps it in float32 inside a float16 model (the recurrence returns a
    float32 state and the cache stores it as is; the releases say `mamba_ssm_dtype:
    float32`). After `float32_islands` the state is rounded to float16 on the way out and
    widened on the way in; this drops both Casts and makes the graph's past and present
    state float32. ONNX Runtime GenAI allocates each state by its graph input's own type
    (src/models/recurrent_state.cpp, microsoft/onnxruntime-genai a0c04eb1), so a float16
    decoder may carry a float32 state.

    Returns:
        How many layers' states became float32.
    """
    import onnx_ir as ir

    graph = model.graph
    changed = 0
    for value in list(graph.inputs):
        if not value.name.endswith(".recurrent_state") or value.dtype != ir.DataType.FLOAT16:
            continue
        uses = [use.node for use in value.uses()]
        if not uses or not all(_casts_to(node, ir.DataType.FLOAT) for node in uses):
            continue
        present = _graph_output(graph, "present." + value.name[len("past_key_values.") :])
        down = present.producer() if present is not None else None
        if down is None or not _casts_to(down, ir.DataType.FLOAT16):
            continue
        wide = down.inputs[0]
        if wide is None or wide.dtype != ir.DataType.FLOAT:
            continue
        value.dtype = ir.DataType.FLOAT
        for node in uses:
            node.outputs[0].replace_all_uses_with(value)
            graph.remove(node, safe=True)
        name = present.name
        graph.outputs[graph.outputs.index(present)] = wide
        graph.remove(down, safe=True)
        wide.name = name
        changed += 1
    return changed


def _casts_to(node: Any, dtype: Any) -> bool:
    return bool(node.op_type == "Cast" and node.attributes.get_int("to") == dtype)


def _graph_output(graph: Any, name: str) -> Any:
    return next((v for v in graph.outputs if v.name == name), None)


def fold_after_weights(model: Any) -> None:
    """Fold the weight transposes and concats mobius leaves until weights are known."""
    with quiet_library():
        from mobius._optimizations import fold_initializers_after_weights

        fold_initializers_after_weights(model)
