"""Gemma 3 vision fixes."""

from __future__ import annotations

import numpy as np

from mmforge.backend.errors import LayoutError
from mmforge.backend.families._graph_edit import initializer
from mmforge.backend.families._hooks import FixRequest


def gemma3_batched_images(request: FixRequest) -> str:
    """Gemma 3: several images per prompt.

    The runtime sizes the vision output by its rank: rank 3 is [images, 256, hidden]; rank
    2 is [256, hidden], one image's worth (the Gemma 3 processor always reports 256). The
    vision graph keeps the image axis (mobius squeezes it), and the embedding flattens
    [images, 256, hidden] to rows before the placeholder replacement.
    """
    models = request.models
    cfg = request.cfg
    import onnx_ir as ir

    vision = models["vision_encoder"].graph
    out = vision.outputs[0]
    squeeze = out.producer()
    if squeeze is None or squeeze.op_type != "Squeeze":
        raise LayoutError("The Gemma 3 vision output has an unexpected form")
    batched = squeeze.inputs[0]
    hidden = int(cfg.text.get("hidden_size"))
    vision.outputs[vision.outputs.index(out)] = batched
    vision.remove(squeeze, safe=False)
    batched.name = "image_features"
    batched.shape = ir.Shape([ir.SymbolicDim("num_images"), ir.SymbolicDim("image_tokens"), hidden])

    embedding = models["embedding"].graph
    old = next(v for v in embedding.inputs if v.name == "image_features")
    # No declared rank: with images the runtime passes [images, 256, hidden], without
    # (text only, decode steps) an empty [0, hidden].
    new = ir.Value(name="image_features", type=ir.TensorType(old.dtype), shape=None)
    old.name = "image_features_rows"
    rows = initializer(embedding, "mmforge_rows_shape", np.array([-1, int(hidden)], dtype=np.int64))
    flatten = ir.node("Reshape", inputs=[new, rows])
    old.replace_all_uses_with(flatten.outputs[0])
    flatten.outputs[0].name = "image_features_rows"
    embedding.inputs[embedding.inputs.index(old)] = new
    embedding.insert_before(embedding.node(0), flatten)
    return "Gemma 3 vision keeps the image axis, so one prompt can hold several images"
