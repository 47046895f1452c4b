"""Phi-4-multimodal fixes: runtime input layouts and the audio projection mode."""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import LayoutError
from mmforge.backend.families._graph_edit import initializer
from mmforge.backend.families._hooks import FixRequest

# The manifest note that tells chat a package takes several images (older ones take one).
PER_IMAGE_NOTE = "runs once per image"


def phi4mm_audio_sizes_input(request: FixRequest) -> str | None:
    """Phi-4-multimodal: the runtime always binds `audio_sizes` to the speech graph.

    mobius's speech graph derives the lengths from the features and has no such input,
    so ORT GenAI 0.18 fails with "Model input was not found: audio_sizes". The graph
    gets the input (one length per clip); its value is not needed.
    """
    models = request.models
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


def phi4mm_images_one_at_a_time(request: FixRequest) -> str:
    """Phi-4-multimodal: run mobius's one-image vision graph once per image, in a Loop.

    The runtime passes every image of a prompt at once: pixel_values [images, crops, 3,
    H, W], image_attention_mask [images, crops, h, w] and image_sizes [images, 2], with
    crops padded to the image that has most. mobius builds the HD transform for one image
    ([crops, 3, H, W], [crops, h, w], [1, 2]), so a second image made the runtime fail
    ("has shape {1414,64} but the computed output shape is {477,64}"). The whole graph
    becomes the body of a Loop over images; each turn takes its image's slices and the
    features are concatenated, as HF concatenates each image's tokens.
    """
    models = request.models
    import onnx_ir as ir

    graph = models["vision_encoder"].graph
    inputs = {v.name: v for v in graph.inputs}
    wanted = ("pixel_values", "image_attention_mask", "image_sizes")
    if any(n not in inputs for n in wanted) or len(graph.outputs) != 1:
        raise LayoutError(f"The Phi-4 vision graph does not take {', '.join(wanted)}")
    features = graph.outputs[0]
    width = features.shape[-1] if features.shape is not None else None
    if not isinstance(width, int):
        raise LayoutError("The Phi-4 vision graph's feature width is unknown")

    outer = {
        name: ir.Value(name=name, type=ir.TensorType(inputs[name].dtype), shape=None)
        for name in wanted
    }
    image = ir.Value(
        name="mmforge_image", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([])
    )
    cond = ir.Value(name="mmforge_cond", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    so_far = ir.Value(name="mmforge_features_so_far", type=ir.TensorType(features.dtype))
    first = ir.node("Unsqueeze", inputs=[image, initializer(graph, "mmforge_axis0", np.array([0]))])
    last = ir.node(
        "Add", inputs=[first.outputs[0], initializer(graph, "mmforge_one", np.array([1]))]
    )
    head: list[Any] = [first, last]
    for name in wanted:
        cut = ir.node(
            "Slice",
            inputs=[
                outer[name],
                first.outputs[0],
                last.outputs[0],
                graph.initializers["mmforge_axis0"],
            ],
        )
        head.append(cut)
        value = cut.outputs[0]
        if name != "image_sizes":  # [1, crops, ...] -> [crops, ...]; sizes stay [1, 2]
            squeeze = ir.node("Squeeze", inputs=[value, graph.initializers["mmforge_axis0"]])
            head.append(squeeze)
            value = squeeze.outputs[0]
        inputs[name].replace_all_uses_with(value)
    # Nodes that only transform weights (transposes, concats) stay outside the Loop, so
    # the folding after the weights are applied still sees them; the rest runs per image.
    constant = set(graph.initializers.values())
    body_nodes = []
    for node in list(graph):
        if all(v is None or v in constant for v in node.inputs):
            constant.update(node.outputs)
        else:
            graph.remove(node)
            body_nodes.append(node)
    grown = ir.node("Concat", inputs=[so_far, features], attributes={"axis": 0})
    keep = ir.node("Identity", inputs=[cond])
    body = ir.Graph(
        inputs=[image, cond, so_far],
        outputs=[keep.outputs[0], grown.outputs[0]],
        nodes=[*head, *body_nodes, grown, keep],
        name="mmforge_one_image",
    )
    body.sort()  # mobius's node order is not always topological (a fused node comes late)
    count = ir.node("Shape", inputs=[outer["pixel_values"]], attributes={"start": 0, "end": 1})
    scalar = ir.node("Squeeze", inputs=[count.outputs[0], graph.initializers["mmforge_axis0"]])
    empty = initializer(
        graph, "mmforge_no_features", np.zeros((0, width), dtype=features.dtype.numpy())
    )
    always = initializer(graph, "mmforge_true", np.array(True))
    loop = ir.node(
        "Loop",
        inputs=[scalar.outputs[0], always, empty],
        attributes={"body": ir.AttrGraph("body", body)},
    )
    for node in (count, scalar, loop):
        graph.append(node)
    for i, node in enumerate([*head, grown, keep, count, scalar]):
        node.outputs[0].name = f"mmforge_loop_{i}"
    # Values left unnamed (mobius's optional outputs) are named per graph when saved, so
    # the Loop body and the outer graph would both define "val_0": name them all here.
    taken = 0
    for node in [*body_nodes, *graph]:
        for value in node.outputs:
            if value.name is None or value.name.startswith("val_"):
                value.name = f"mmforge_value_{taken}"
                taken += 1
    graph.inputs.clear()
    graph.inputs.extend(outer[name] for name in wanted)
    output_name = features.name
    features.name = "mmforge_image_features"
    loop.outputs[0].name = output_name
    loop.outputs[0].dtype = features.dtype
    graph.outputs.clear()
    graph.outputs.append(loop.outputs[0])
    graph.sort()
    return f"Phi-4 vision: mobius's one-image graph {PER_IMAGE_NOTE} in a Loop"


def phi4mm_projection_mode(request: FixRequest) -> str | None:
    """Phi-4-multimodal: pick the audio projection branch by the runtime's mode codes.

    ORT GenAI 0.18 passes audio_projection_mode 2 for speech alone and 3 for speech with
    an image; mobius's graph takes the vision-speech branch only for 1. With an image,
    HF projects audio through the vision-speech branch, so the test becomes `mode == 3`.
    """
    models = request.models
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
