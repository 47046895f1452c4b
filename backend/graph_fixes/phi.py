"""Phi-4-multimodal fixes: runtime input layouts and the audio projection mode."""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import LayoutError
from mmforge.backend.families._base import Cfg
from mmforge.backend.graph_fixes._common import GraphEdit, initializer


def phi4mm_audio_sizes_input(models: dict[str, Any], cfg: Cfg) -> str | None:
    """Phi-4-multimodal: the runtime always binds `audio_sizes` to the speech graph.

    mobius's speech graph derives the lengths from the features and has no such input,
    so ORT GenAI 0.18 fails with "Model input was not found: audio_sizes". The graph
    gets the input (one length per clip); its value is not needed.
    """
    import onnx_ir as ir

    speech = models.get("audio_encoder")
    if speech is None or any(v.name == "audio_sizes" for v in speech.graph.inputs):
        return None
    speech.graph.inputs.append(
        ir.Value(
            name="audio_sizes",
            type=ir.TensorType(ir.DataType.INT64),
            shape=ir.Shape([ir.SymbolicDim("num_audios")]),
        )
    )
    return "Phi-4 speech graph: an audio_sizes input for the runtime to bind"


def phi4mm_crops_as_batch(models: dict[str, Any], cfg: Cfg) -> str:
    """Phi-4-multimodal: take the runtime's [images, crops, ...] pixels and masks.

    The runtime passes pixel_values [images, crops, 3, H, W] and image_attention_mask
    [images, crops, h, w]; mobius's vision graph reads crops as its batch axis
    ([crops, 3, H, W], [crops, h, w]). The inputs lose their declared rank and are
    flattened to that layout first.
    """
    import onnx_ir as ir

    graph = models["vision_encoder"].graph
    edit = GraphEdit(graph)
    for name in ("pixel_values", "image_attention_mask"):
        old = next((v for v in graph.inputs if v.name == name), None)
        if old is None or old.shape is None:
            raise LayoutError(f"The Phi-4 vision graph has no {name} input of known shape")
        tail = [int(d) for d in list(old.shape)[1:]]
        new = ir.Value(name=name, type=ir.TensorType(old.dtype), shape=None)
        old.name = f"{name}_crops"
        shape = edit.const(f"mmforge_{name}_crops", np.array([-1, *tail], dtype=np.int64))
        flat = edit.add("Reshape", [new, shape])
        old.replace_all_uses_with(flat)
        flat.name = f"{name}_crops"
        graph.inputs[graph.inputs.index(old)] = new
    edit.insert_before(graph.node(0))
    return "Phi-4 vision: the runtime's per-image crops are flattened into the batch axis"


def phi4mm_projection_mode(models: dict[str, Any], cfg: Cfg) -> str | None:
    """Phi-4-multimodal: pick the audio projection branch by the runtime's mode codes.

    ORT GenAI 0.18 passes audio_projection_mode 2 for speech alone and 3 for speech with
    an image; mobius's graph takes the vision-speech branch only for 1. With an image,
    HF projects audio through the vision-speech branch, so the test becomes `mode == 3`.
    """
    speech = models.get("audio_encoder")
    if speech is None:
        return None
    mode = next((v for v in speech.graph.inputs if v.name == "audio_projection_mode"), None)
    if mode is None:
        raise LayoutError("The Phi-4 speech graph has no audio_projection_mode input")
    equals = [u.node for u in mode.uses() if u.node.op_type == "Equal"]
    if len(equals) != 1:
        raise LayoutError("The Phi-4 speech graph chooses its projection in an unexpected way")
    both = initializer(speech.graph, "mmforge_mode_speech_and_vision", np.array(3, dtype=np.int64))
    equals[0].replace_input_with(1, both)
    return "Phi-4 speech: the vision-speech projection follows the runtime's mode 3"
