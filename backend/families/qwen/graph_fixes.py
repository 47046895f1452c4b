"""Qwen2.5-VL and Qwen3-VL fixes: multi-image padding and DeepStack."""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import LayoutError
from mmforge.backend.families._graph_edit import GraphEdit, initializer
from mmforge.backend.families._hooks import FixRequest


def qwen_unpad_images(request: FixRequest) -> str:
    """Qwen-VL: several images of different sizes in one prompt.

    The runtime stacks the patches of each image padded to the largest image
    ([images · max_patches, dim]), while the vision graph reads the patches of image i
    right after those of image i-1. The graph now first keeps, per image, the rows its
    grid (t·h·w) accounts for, in order, and drops the padding.
    """
    models = request.models
    graph = models["vision_encoder"].graph
    inputs = {v.name: v for v in graph.inputs}
    pixels, grid = inputs.get("pixel_values"), inputs.get("image_grid_thw")
    if pixels is None or grid is None:
        raise LayoutError("The Qwen vision graph lacks pixel_values or image_grid_thw")
    edit = GraphEdit(graph)
    add, const = edit.add, edit.const
    zero = const("mmforge_i64_0", np.array(0, dtype=np.int64))
    one = const("mmforge_i64_1", np.array(1, dtype=np.int64))
    axis0 = const("mmforge_axes_0", np.array([0], dtype=np.int64))
    axis1 = const("mmforge_axes_1_", np.array([1], dtype=np.int64))
    flat = const("mmforge_flat", np.array([-1], dtype=np.int64))
    counts = add("ReduceProd", [grid, axis1], keepdims=0)  # [N] patches per image
    images = add("Shape", [grid], start=0, end=1)  # [1]
    rows = add("Shape", [pixels], start=0, end=1)  # [1]
    longest = add("Squeeze", [add("Div", [rows, images]), axis0])  # scalar max patches
    slots = add("Range", [zero, longest, one])  # [P]
    keep = add("Less", [add("Unsqueeze", [slots, axis0]), add("Unsqueeze", [counts, axis1])])
    index = add("Squeeze", [add("NonZero", [add("Reshape", [keep, flat])]), axis0])
    # Clean value for the graph's consumers of pixel_values.
    unpadded = add("Gather", [pixels, index], axis=0)
    for use in list(pixels.uses()):
        if use.node not in edit.nodes:
            use.node.replace_input_with(use.idx, unpadded)
    edit.insert_before(graph.node(0))
    return "Qwen vision: per-image padding of the runtime's stacked patches is removed"


def qwen3_deepstack(request: FixRequest) -> str:
    """Qwen3-VL: carry the DeepStack levels from the vision encoder to the decoder.

    ORT GenAI 0.18 passes one image_features tensor to the embedding and one
    inputs_embeds tensor to the decoder. The vision graph (see graphs._deepstack_vision)
    emits [merged ‖ level 1 ‖ … ‖ level K] per image token; the embedding writes all of
    it at image positions and zeros in the extra columns at text positions; the decoder
    uses the first H columns as embeddings and adds column block k after layer k-1, as
    HF adds deepstack_visual_embeds[k-1] at image positions. decoder.hidden_size in
    genai_config becomes (1 + K)·H; the KV cache is unaffected.
    """
    models = request.models
    cfg = request.cfg
    import onnx_ir as ir

    levels = len(cfg.get("vision_config.deepstack_visual_indexes") or [])
    hidden = int(cfg.text.get("hidden_size"))
    layers = int(cfg.text.get("num_hidden_layers"))
    if levels == 0:
        return "Qwen3-VL without DeepStack levels"
    if levels > layers:
        raise LayoutError(f"{levels} DeepStack levels for {layers} decoder layers")
    wide = (1 + levels) * hidden
    _widen_embedding(models["embedding"].graph, hidden, wide)
    decoder = models["decoder"].graph
    old = next(v for v in decoder.inputs if v.name == "inputs_embeds")
    new = ir.Value(
        name="inputs_embeds",
        type=ir.TensorType(old.dtype),
        shape=ir.Shape([old.shape[0], old.shape[1], wide]),
    )
    old.name = "inputs_embeds_main"
    front = decoder.node(0)

    def columns(start: int, stop: int) -> Any:
        bounds = [
            initializer(decoder, f"mmforge_ds_{start}_{name}", np.array([v], dtype=np.int64))
            for name, v in (("start", start), ("stop", stop), ("axis", 2))
        ]
        node = ir.node("Slice", inputs=[new, *bounds])
        decoder.insert_before(front, node)  # depends only on the graph input
        return node.outputs[0]

    main = columns(0, hidden)
    old.replace_all_uses_with(main)
    decoder.inputs[decoder.inputs.index(old)] = new
    skips = [n for n in decoder if n.op_type == "SkipSimplifiedLayerNormalization"]
    for k in range(levels):
        # The fused norm that opens layer k+1 (or the final norm) sums the residual
        # stream with layer k's MLP output: adding level k+1 to that MLP output puts it
        # into the residual stream exactly where HF adds it.
        marker = f"layers.{k + 1}.input_layernorm" if k + 1 < layers else "model.norm"
        opening = [n for n in skips if marker in n.outputs[0].name]
        if len(opening) != 1:
            raise LayoutError("The Qwen3-VL decoder has an unexpected layer structure")
        level = columns((k + 1) * hidden, (k + 2) * hidden)
        add = ir.node("Add", inputs=[opening[0].inputs[1], level])
        decoder.insert_before(opening[0], add)
        opening[0].replace_input_with(1, add.outputs[0])
    return f"Qwen3-VL DeepStack: {levels} levels carried as extra embedding columns"


def _widen_embedding(graph: Any, hidden: int, wide: int) -> None:
    """Take [N, wide] image features and output [B, S, wide] embeddings."""
    import onnx_ir as ir

    features = next(v for v in graph.inputs if v.name == "image_features")
    features.shape = ir.Shape([features.shape[0], wide])
    where = [n for n in graph if n.op_type == "Where"]
    concat = [n for n in graph if n.op_type == "Concat" and n.inputs[0] is features]
    if len(where) != 1 or len(concat) != 1 or concat[0].inputs[1].const_value is None:
        raise LayoutError("The Qwen3-VL embedding graph has an unexpected form")
    zero_row = concat[0].inputs[1]
    zero_row.const_value = ir.tensor(np.zeros((1, wide), dtype=zero_row.const_value.numpy().dtype))
    zero_row.shape = ir.Shape([1, wide])
    text = where[0].inputs[2]
    edit = GraphEdit(graph)
    dims = edit.add("Shape", [text], start=0, end=2)
    extra = edit.const("mmforge_ds_extra", np.array([wide - hidden], dtype=np.int64))
    zero = ir.tensor(np.zeros(1, dtype=zero_row.const_value.numpy().dtype))
    zeros = edit.add("ConstantOfShape", [edit.add("Concat", [dims, extra], axis=0)], value=zero)
    padded = edit.add("Concat", [text, zeros], axis=2)
    edit.insert_before(where[0])
    where[0].replace_input_with(2, padded)
    graph.outputs[0].shape = ir.Shape([graph.outputs[0].shape[0], graph.outputs[0].shape[1], wide])
    # Shapes recorded at build time still say `hidden` wide; ORT plans buffers by them.
    for node in graph:
        for value in node.outputs:
            if not value.is_graph_output():
                value.shape = None
