"""Phi-3.5-Vision's vision graph as the runtime calls it: HD transform and projector inside.

mobius 0.1 builds the CLIP tower alone: crops [n, 3, 336, 336] in, patch features
[n, 576, C] out (layer -2, class token dropped). ONNX Runtime GenAI 0.18's `phi3v`
pipeline feeds pixel_values [images, 1 + num_crops, 3, 336, 336] (the global view first,
crops padded with zeros to num_crops) and image_sizes [images, 2] (the HD-resized height
and width, multiples of 336), and embeds the returned rows [image tokens, hidden] in
order. The tower becomes the body of a Loop over images; each turn runs it on its
image's 1 + rows·cols real crops and then does what the remote code's
`hd_feature_transform` does:

- each crop's 24×24 patches merge 2×2 into a 12×12 grid 4·C wide;
- the crops tile into a (rows·12) × (cols·12) grid, and the global view into 12 × 12;
- `sub_GN` ends every row of both grids; `glb_GN` sits between them (order sub_glb);
- Linear → GELU (exact) → Linear (`img_projection.0` / `.2`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import LayoutError
from mmforge.backend.families._graph_edit import initializer

# Initializer names of the HD transform's weights: this prefix + the name under
# model.vision_embed_tokens. (glb_GN, sub_GN, img_projection.0.weight, ...).
PREFIX = "vision_encoder.hd."
NOTE = "runs the CLIP tower, HD transform and projector once per image in a Loop"


class _Body:
    """Collects the nodes of the Loop body (onnx_ir), with constants in the outer graph."""

    def __init__(self, graph: Any):
        self.graph = graph
        self.nodes: list[Any] = []

    def op(self, kind: str, *inputs: Any, **attrs: Any) -> Any:
        import onnx_ir as ir

        node = ir.node(kind, inputs=list(inputs), attributes=attrs)
        self.nodes.append(node)
        return node.outputs[0]

    def ints(self, name: str, values: list[int]) -> Any:
        return initializer(self.graph, f"mmforge_hd_{name}", np.array(values, dtype=np.int64))

    def weight(self, name: str, shape: list[int]) -> Any:
        """An initializer the weight stage fills from the checkpoint."""
        import onnx_ir as ir

        value = ir.Value(
            name=PREFIX + name, type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(shape)
        )
        self.graph.initializers.add(value)
        return value


def complete_vision_graph(
    model: Any, written: dict[str, Any], tower: dict[str, Any], hidden: int
) -> str:
    """Turn mobius's per-crop tower graph into the runtime's per-prompt vision graph.

    Args:
        model: mobius's vision_encoder model (onnx_ir), changed in place.
        written: config.json as written.
        tower: The tower's config (`layout.vision_config`).
        hidden: The text model's hidden size (the projector's output width).

    Returns:
        A line for the manifest.
    """
    import onnx_ir as ir

    graph = model.graph
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise LayoutError("The Phi-3.5-Vision tower graph does not take one input")
    crops_in, features = graph.inputs[0], graph.outputs[0]
    crop = int(tower["image_size"])
    side = crop // int(tower["patch_size"])
    if side % 2:
        raise LayoutError(f"A {side}×{side} patch grid cannot merge 2×2")
    half, width = side // 2, 4 * int(tower["hidden_size"])
    if width != 4 * int((written.get("img_processor") or {}).get("image_dim_out", width // 4)):
        raise LayoutError("The tower's width differs from img_processor.image_dim_out")

    pixel_values = ir.Value(
        name="pixel_values",
        type=ir.TensorType(ir.DataType.FLOAT),
        shape=ir.Shape(["num_images", "max_crops", 3, crop, crop]),
    )
    image_sizes = ir.Value(
        name="image_sizes", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(["num_images", 2])
    )
    image = ir.Value(
        name="mmforge_image", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([])
    )
    cond = ir.Value(name="mmforge_cond", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    so_far = ir.Value(
        name="mmforge_features_so_far",
        type=ir.TensorType(ir.DataType.FLOAT),
        shape=ir.Shape(["tokens_so_far", hidden]),
    )

    b = _Body(graph)
    zero, one, two = b.ints("0", [0]), b.ints("1", [1]), b.ints("2", [2])
    first = b.op("Unsqueeze", image, zero)
    after = b.op("Add", first, one)
    pixels = b.op("Squeeze", b.op("Slice", pixel_values, first, after, zero), zero)
    size = b.op("Squeeze", b.op("Slice", image_sizes, first, after, zero), zero)
    grid = b.op("Div", size, b.ints("crop", [crop]))  # [rows, cols] of 336 px crops
    rows = b.op("Slice", grid, zero, one, zero)
    cols = b.op("Slice", grid, one, two, zero)
    count = b.op("Add", b.op("Mul", rows, cols), one)  # the global view + the crops
    # The global view is made again from the crops, as HF's processor makes it (torch's
    # bicubic interpolation, no antialiasing): ORT GenAI 0.18's Phi3ImageTransform
    # resamples it with PIL's antialiased bicubic instead (measured: mean 0.055, max 0.66
    # apart from HF's on a 500×300 image), while its crops are HF's exactly.
    crops = b.op("Slice", pixels, one, count, zero)
    whole = b.op(
        "Reshape",
        b.op(
            "Transpose",
            b.op(
                "Reshape", crops, b.op("Concat", rows, cols, b.ints("chw", [3, crop, crop]), axis=0)
            ),
            perm=[2, 0, 3, 1, 4],
        ),
        b.op(
            "Concat",
            b.ints("one_image", [1, 3]),
            b.op("Mul", rows, b.ints("crop_side", [crop])),
            b.op("Mul", cols, b.ints("crop_side2", [crop])),
            axis=0,
        ),
    )
    glb_view = b.op(
        "Resize",
        whole,
        None,
        None,
        b.ints("glb_size", [1, 3, crop, crop]),
        mode="cubic",
        cubic_coeff_a=-0.75,
        coordinate_transformation_mode="half_pixel",
    )
    real = b.op("Concat", glb_view, crops, axis=0)
    crops_in.replace_all_uses_with(real)
    features.name = "mmforge_crop_features"

    # Each crop's side×side patches merged 2×2: [n, half, half, 4C].
    merged = b.op(
        "Reshape",
        b.op(
            "Transpose",
            b.op("Reshape", features, b.ints("split", [-1, half, 2, half, 2, width // 4])),
            perm=[0, 1, 3, 2, 4, 5],
        ),
        b.ints("merged", [-1, half, half, width]),
    )
    sub_gn = b.op("Reshape", b.weight("sub_GN", [1, 1, 1, width]), b.ints("row_end", [1, 1, width]))
    glb_gn = b.op("Reshape", b.weight("glb_GN", [1, 1, width]), b.ints("one_row", [1, width]))
    flat = b.ints("flat", [-1, width])

    # The global view: 12 rows of 12, sub_GN after each.
    glb = b.op(
        "Reshape", b.op("Slice", merged, zero, one, zero), b.ints("glb", [half, half, width])
    )
    glb_ends = b.op("Expand", sub_gn, b.ints("glb_ends", [half, 1, width]))
    glb_rows = b.op("Reshape", b.op("Concat", glb, glb_ends, axis=1), flat)

    # The crops tiled row by row: [rows·half, cols·half, 4C], sub_GN after each row.
    halves = b.ints("half", [half])
    tiles = b.op(
        "Reshape",
        b.op("Slice", merged, one, count, zero),
        b.op("Concat", rows, cols, halves, halves, b.ints("width", [width]), axis=0),
    )
    tiled_shape = b.op(
        "Concat", b.op("Mul", rows, halves), b.op("Mul", cols, halves), b.ints("w", [width]), axis=0
    )
    tiled = b.op("Reshape", b.op("Transpose", tiles, perm=[0, 2, 1, 3, 4]), tiled_shape)
    sub_ends = b.op(
        "Expand",
        sub_gn,
        b.op("Concat", b.op("Mul", rows, halves), one, b.ints("w2", [width]), axis=0),
    )
    sub_rows = b.op("Reshape", b.op("Concat", tiled, sub_ends, axis=1), flat)

    joined = b.op("Concat", sub_rows, glb_gn, glb_rows, axis=0)
    projected = b.op(
        "Gemm",
        b.op(
            "Gelu",
            b.op(
                "Gemm",
                joined,
                b.weight("img_projection.0.weight", [hidden, width]),
                b.weight("img_projection.0.bias", [hidden]),
                transB=1,
            ),
        ),
        b.weight("img_projection.2.weight", [hidden, hidden]),
        b.weight("img_projection.2.bias", [hidden]),
        transB=1,
    )
    grown = b.op("Concat", so_far, projected, axis=0)
    keep = b.op("Identity", cond)
    _into_loop(model, b, [image, cond, so_far], [keep, grown], pixel_values, image_sizes, hidden)
    return f"Phi-3.5-Vision vision: mobius's CLIP tower {NOTE}"


def _into_loop(
    model: Any,
    b: _Body,
    body_inputs: list[Any],
    body_outputs: list[Any],
    pixel_values: Any,
    image_sizes: Any,
    hidden: int,
) -> None:
    """Move every node that depends on the pixels into a Loop over the images."""
    import onnx_ir as ir

    graph = model.graph
    # Nodes that only transform weights stay outside, so folding after the weights are
    # applied still sees them; the tower's others run per image.
    constant = set(graph.initializers.values())
    tower_nodes = []
    for node in list(graph):
        if all(v is None or v in constant for v in node.inputs):
            constant.update(node.outputs)
        else:
            graph.remove(node)
            tower_nodes.append(node)
    body = ir.Graph(
        inputs=body_inputs,
        outputs=body_outputs,
        nodes=[*b.nodes, *tower_nodes],
        name="mmforge_one_image",
    )
    body.sort()
    count = ir.node("Shape", inputs=[pixel_values], attributes={"start": 0, "end": 1})
    scalar = ir.node("Squeeze", inputs=[count.outputs[0], graph.initializers["mmforge_hd_0"]])
    empty = initializer(graph, "mmforge_hd_none", np.zeros((0, hidden), dtype=np.float32))
    always = initializer(graph, "mmforge_hd_true", np.array(True))
    loop = ir.node(
        "Loop",
        inputs=[scalar.outputs[0], always, empty],
        attributes={"body": ir.AttrGraph("body", body)},
    )
    for node in (count, scalar, loop):
        graph.append(node)
    # Every value gets a name unique across both graphs (unnamed ones would be named
    # per graph when saved, and the body and outer graph would both define "val_0").
    count.outputs[0].name, scalar.outputs[0].name = "mmforge_hd_images", "mmforge_hd_n"
    ours = {v for node in b.nodes for v in node.outputs}
    for taken, value in enumerate(v for node in (*b.nodes, *tower_nodes) for v in node.outputs):
        if value in ours or value.name is None or value.name.startswith("val_"):
            value.name = f"mmforge_hd_value_{taken}"
    graph.inputs.clear()
    graph.inputs.extend([pixel_values, image_sizes])
    out = loop.outputs[0]
    out.name = "image_features"
    out.dtype = ir.DataType.FLOAT
    out.shape = ir.Shape(["image_tokens", hidden])
    graph.outputs.clear()
    graph.outputs.append(out)
    graph.sort()
