"""Graph building: mobius-onnx as the engine, behind this one module.

mobius builds numerically right graphs for several families. Everything around it is
ours: the config normalisation before the build, the weight application with its report,
and the whole ONNX Runtime GenAI packaging. Only this module imports mobius, so a mobius
upgrade or a replacement graph builder touches one file. LFM2-VL, which mobius does not
know, is dispatched from here to lfm2_graphs.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmforge.backend.errors import LayoutError, MmforgeError
from mmforge.backend.families import Family
from mmforge.backend.jobs import JobContext

log = logging.getLogger(__name__)

# mobius names the components as in the seeds' I/O contract.
COMPONENT_NAMES = ("vision_encoder", "audio_encoder", "embedding", "decoder")
_DTYPES = {"f32": "f32", "f16": "f16", "int4": "f32"}  # int4 quantizes an f32 decoder


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
        must_use: Checkpoint name prefixes whose every tensor must reach a graph: one left
            unused is a conversion error (a builder that bakes its own weights may skip
            one silently, as ORT GenAI's did LFM2's projection biases).
    """

    models: dict[str, Any]
    module: Any = None
    baked: dict[str, dict[str, tuple[tuple[str, ...], str]]] = dataclasses.field(
        default_factory=dict
    )
    work: Path | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    must_use: tuple[str, ...] = ()

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


def _deepstack_vision(module: Any) -> None:
    """Qwen3-VL: the vision graph outputs [merged ‖ DeepStack level 1 ‖ … ‖ level K].

    mobius computes the DeepStack mergers but its 3-model vision encoder returns only
    the merged features. The runtime has one image_features tensor, so the K levels
    travel as extra columns (see graph_fixes.qwen3_deepstack_* for the other ends).
    """
    from mobius.models.qwen_vl import Qwen3VLVisionEncoderModel

    class DeepStackVisionEncoder(Qwen3VLVisionEncoderModel):  # type: ignore[misc]
        def forward(self, op: Any, pixel_values: Any, image_grid_thw: Any) -> Any:
            outputs = self.visual(op, hidden_states=pixel_values, grid_thw=image_grid_thw)
            if isinstance(outputs, tuple) and len(outputs) > 1:
                return op.Concat(*outputs, axis=-1)
            return outputs[0] if isinstance(outputs, tuple) else outputs

    module.vision_encoder.__class__ = DeepStackVisionEncoder


def _flat_head_dims(hf_config: Any) -> None:
    """Gemma 4: give mobius the flat `global_head_dim` it reads.

    transformers 5 moves the global layers' head size into `per_layer_config` and makes
    `head_dim` raise AmbiguousGlobalPerLayerAttributeError when read globally.
    """
    audio = getattr(hf_config, "audio_config", None)
    if audio is not None and getattr(audio, "num_attention_heads", 8) != 8:
        raise MmforgeError(
            f"This Gemma 4 audio encoder has {audio.num_attention_heads} attention heads",
            "The graph builder (mobius 0.1) supports the released layout with 8",
        )
    text = getattr(hf_config, "text_config", hf_config)
    if getattr(text, "use_bidirectional_attention", None) == "all":
        # Every token attends both ways: not a generative decoder the runtime can drive.
        raise MmforgeError(
            "This Gemma 4 checkpoint attends bidirectionally over all tokens",
            "Only causal (or image-bidirectional) Gemma 4 checkpoints can be converted",
        )
    text.allow_global_per_layer_attribute_access = True
    per_layer = text.to_dict().get("per_layer_config") or {}
    sizes = {v["head_dim"] for v in per_layer.values() if isinstance(v, dict) and "head_dim" in v}
    if len(sizes) > 1:
        raise LayoutError(f"Several global head sizes in per_layer_config: {sorted(sizes)}")
    object.__setattr__(text, "global_head_dim", sizes.pop() if sizes else text.head_dim)


def _phi4mm_remote_style(hf_config: Any) -> None:
    """Phi-4-multimodal: describe the native config's audio encoder the way mobius reads it.

    mobius 0.1 reads the remote-code `audio_processor.config` block; the native
    transformers config keeps the same sizes in `audio_config` under other names.
    """
    audio = getattr(hf_config, "audio_config", None)
    if audio is None:
        return
    hf_config.audio_processor = {
        "config": {
            "attention_dim": audio.hidden_size,
            "attention_heads": audio.num_attention_heads,
            "num_blocks": audio.num_blocks,
            "linear_units": audio.intermediate_size,
            "kernel_size": audio.kernel_size,
            "input_size": audio.input_size,
            "nemo_conv_settings": {"conv_channels": audio.nemo_conv_channels},
            "relative_attention_bias_args": {"t5_bias_max_distance": audio.bias_max_distance},
        }
    }
    hf_config.embd_layer = {"image_embd_layer": {}, "audio_embd_layer": {}}


# Config normalisations before the build, named by PackageSpec.config_patch.
CONFIG_PATCHES = {
    "gemma4_flat_head_dims": _flat_head_dims,
    "phi4mm_remote_style": _phi4mm_remote_style,
}

# Adaptations of mobius modules, named by PackageSpec.module_patch.
MODULE_PATCHES = {"qwen3_deepstack": _deepstack_vision}


def build_graphs(
    folder: Path,
    family: Family,
    dtype: str,
    ep: str,
    *,
    work: Path | None = None,
    ctx: JobContext | None = None,
) -> BuiltGraphs:
    """Build the component graphs of a checkpoint, without weights.

    Args:
        folder: Checkpoint folder (config.json).
        family: Its family entry.
        dtype: "f32", "f16" or "int4" (int4 builds f32; the decoder is quantized later).
        ep: "cpu" or "cuda" steer mobius's EP-specific fusions; "default" builds the
            portable graph without them.
        work: A scratch folder for builders that write files (LFM2-VL's decoder).
        ctx: Progress and cancel for builders that run for long.

    Raises:
        MmforgeError: mobius does not know the model type, or its build failed.
    """
    if family.package and family.package.engine == "lfm2_vl":
        return _build_lfm2_vl(folder, work, ctx or JobContext())
    import transformers

    with quiet_library():
        from mobius._builder import build_from_module, resolve_dtype
        from mobius._config_resolver import _config_from_hf, _default_task_for_model
        from mobius._registry import registry

    hf_config = transformers.AutoConfig.from_pretrained(folder)
    if family.package and family.package.config_patch:
        CONFIG_PATCHES[family.package.config_patch](hf_config)
    model_type = hf_config.model_type
    if model_type not in registry:
        raise MmforgeError(
            f"The graph builder (mobius) has no {family.name} model ({model_type})",
            "This family cannot be converted yet",
        )
    module_class = registry.get(model_type)
    text_config = getattr(hf_config, "text_config", None) or hf_config
    config = _config_from_hf(text_config, parent_config=hf_config, module_class=module_class)
    config = dataclasses.replace(config, dtype=resolve_dtype(_DTYPES[dtype]))
    task = _default_task_for_model(model_type)
    try:
        with quiet_library():
            module = module_class(config)
            patch = family.package.module_patch if family.package else None
            if patch:
                MODULE_PATCHES[patch](module)
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


def _build_lfm2_vl(folder: Path, work: Path | None, ctx: JobContext) -> BuiltGraphs:
    """LFM2-VL: our vision and embedding graphs, the ORT GenAI builder's decoder."""
    import onnx_ir as ir

    from mmforge.backend import lfm2_graphs
    from mmforge.backend.families import Cfg
    from mmforge.backend.source import read_json

    if work is None:
        raise LayoutError("The LFM2-VL build needs a scratch folder")
    cfg = Cfg(read_json(folder / "config.json", "model"))
    models = {
        "vision_encoder": lfm2_graphs.vision_graph(cfg),
        "embedding": lfm2_graphs.embedding_graph(cfg),
    }
    # The builder's CPU flavour for every target: its CUDA flavour fuses the Q/K norms into
    # GroupQueryAttention under other weight names, which could not be checked here
    # without a GPU. The CUDA provider runs the portable graph too.
    layers = int(cfg.text.get("num_hidden_layers"))
    built = lfm2_graphs.builder_decoder(folder, work, "cpu", ctx, layers)
    models["decoder"] = ir.load(built / "model.onnx")
    fixed = lfm2_graphs.add_conv_biases(models["decoder"], cfg, folder)
    return BuiltGraphs(
        models=models,
        baked={"decoder": lfm2_graphs.builder_sources(cfg)},
        work=work,
        notes=[fixed] if fixed else [],
        must_use=lfm2_graphs.MUST_USE,
    )


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


def fold_after_weights(model: Any) -> None:
    """Fold the weight transposes and concats mobius leaves until weights are known."""
    with quiet_library():
        from mobius._optimizations import fold_initializers_after_weights

        fold_initializers_after_weights(model)
