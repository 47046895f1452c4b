"""Phi-4-multimodal's global view (crop 0), made from the crops as transformers makes it.

Phi4MultimodalImageProcessor interpolates the whole HD image (the crops put back
together) to one crop with torch's bicubic, without antialiasing. ONNX Runtime GenAI
0.18's Phi4VisionProcessor makes the view from the same crops with PIL's antialiased
bicubic (hard-coded: its `interpolation` attribute is ignored), so for a picture of more
than one crop the two views differ (0.26 apart on a 6000×4000 photo after
normalisation, 0.96 on a 900×600 noise picture; tests/backend/test_phi_pictures.py),
while the crops are transformers' exactly. The package's vision graph therefore makes
the view again from the runtime's crops with ONNX's `Resize` (cubic, a = -0.75,
half_pixel, no antialiasing: torch's bicubic to float rounding), and verify's reference
does the same (`with_hf_global_view`).

A package converted before this keeps the runtime's view: its manifest lacks
`GLOBAL_VIEW_NOTE`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import LayoutError
from mmforge.backend.families._graph_edit import initializer
from mmforge.backend.families._hooks import FixRequest

# The manifest note of a package whose vision graph makes the global view itself.
GLOBAL_VIEW_NOTE = "makes the global view from the crops as transformers does"
# What verify's report says of the comparison.
PREPROCESSING_NOTE = (
    "Phi-4-multimodal: ONNX Runtime GenAI 0.18's Phi4VisionProcessor makes a picture's "
    "global view (crop 0) from its crops with its own kernel (PIL's antialiased bicubic); "
    "the package's vision graph makes it again from the crops as transformers does, and "
    "verify compares that view. A package converted before mmforge did so (its manifest "
    "notes do not say the graph makes the global view) reads the runtime's view: its "
    "vision stage differs from transformers' on any picture of more than one crop; "
    "convert the model again"
)
_PREFIX = "mmforge_view_"


def phi4mm_hf_global_view(request: FixRequest) -> str:
    """Phi-4-multimodal: the one-image vision graph makes crop 0 from crops 1.. itself.

    mobius's graph takes pixel_values [crops, 3, C, C] (the global view first, then the
    HD image's crops row by row, then zero crops up to the prompt's most) and image_sizes
    [1, 2] (the HD image's height and width, whole crops). Every reader of pixel_values
    gets them with crop 0 replaced by the HD image resized to C × C; the Resize runs in
    float32 whatever the graph's weights are (its input is float32,
    `graphs.ensure_f32_encoder_inputs`).
    """
    import onnx_ir as ir

    graph = request.models["vision_encoder"].graph
    inputs = {v.name: v for v in graph.inputs}
    pixels, sizes = inputs.get("pixel_values"), inputs.get("image_sizes")
    if pixels is None or sizes is None:
        raise LayoutError("The Phi-4 vision graph does not take pixel_values and image_sizes")
    if pixels.dtype != ir.DataType.FLOAT:
        raise LayoutError("The Phi-4 vision graph does not take float32 pixel_values")
    crop = _crop_side(pixels, request)
    readers = [(use.node, use.idx) for use in pixels.uses()]
    nodes: list[Any] = []

    def op(kind: str, *args: Any, **attrs: Any) -> Any:
        node = ir.node(kind, inputs=list(args), attributes=attrs)
        nodes.append(node)
        return node.outputs[0]

    def ints(name: str, values: list[int]) -> Any:
        return initializer(graph, f"{_PREFIX}const_{name}", np.array(values, dtype=np.int64))

    zero, one, two = ints("0", [0]), ints("1", [1]), ints("2", [2])
    grid = op("Div", op("Reshape", sizes, two), ints("crop", [crop]))  # [rows, cols]
    rows, cols = op("Slice", grid, zero, one, zero), op("Slice", grid, one, two, zero)
    count = op("Add", op("Mul", rows, cols), one)
    crops = op("Slice", pixels, one, count, zero)
    tiles = op("Reshape", crops, op("Concat", rows, cols, ints("chw", [3, crop, crop]), axis=0))
    side = ints("side", [crop])
    whole_shape = op(
        "Concat", ints("one_image", [1, 3]), op("Mul", rows, side), op("Mul", cols, side), axis=0
    )
    whole = op("Reshape", op("Transpose", tiles, perm=[2, 0, 3, 1, 4]), whole_shape)
    # torch's bicubic: a = -0.75, half-pixel centres, no antialiasing (Resize's default).
    view = op(
        "Resize",
        whole,
        None,
        None,
        ints("view", [1, 3, crop, crop]),
        mode="cubic",
        cubic_coeff_a=-0.75,
        coordinate_transformation_mode="half_pixel",
    )
    rest = op("Slice", pixels, one, ints("end", [np.iinfo(np.int64).max]), zero)
    remade = op("Concat", view, rest, axis=0)
    for i, node in enumerate(nodes):  # unique across the Loop body and its graph
        node.name, node.outputs[0].name = f"{_PREFIX}node_{i}", f"{_PREFIX}value_{i}"
    remade.dtype = pixels.dtype
    for node in nodes:
        graph.append(node)
    for node, index in readers:
        node.replace_input_with(index, remade)
    graph.sort()
    return f"Phi-4 vision: the graph {GLOBAL_VIEW_NOTE} (torch's bicubic, not the runtime's)"


def _crop_side(pixels: Any, request: FixRequest) -> int:
    """The crop side the graph takes: its input's static side, else the config's."""
    shape = pixels.shape
    if shape is not None and len(shape) == 4 and isinstance(shape[-1], int):
        return int(shape[-1])
    side = request.cfg.get("vision_config.crop_size", 448)
    if not isinstance(side, int) or isinstance(side, bool) or side <= 0:
        raise LayoutError(f"The Phi-4 vision config's crop_size is not a size: {side!r}")
    return side


def with_hf_global_view(pixel_values: Any, image_sizes: Any) -> Any:
    """The runtime's pixels [images, crops, 3, C, C] with crop 0 made as transformers does.

    Args:
        pixel_values: The runtime's pixels (torch, float32).
        image_sizes: Each image's HD height and width [images, 2] (whole crops).

    Raises:
        ValueError: Sizes that are not whole crops within the pixels' crop count.
    """
    from torch.nn import functional as F

    crop = int(pixel_values.shape[-1])
    out = pixel_values.clone()
    for i, (height, width) in enumerate(image_sizes.tolist()):
        rows, cols = int(height) // crop, int(width) // crop
        if rows < 1 or cols < 1 or rows * crop != height or cols * crop != width:
            raise ValueError(f"image {i}'s size {height}×{width} is not whole {crop} px crops")
        if 1 + rows * cols > pixel_values.shape[1]:
            raise ValueError(f"image {i}'s size {height}×{width} needs more crops than it has")
        tiles = pixel_values[i, 1 : 1 + rows * cols].reshape(rows, cols, 3, crop, crop)
        whole = tiles.permute(2, 0, 3, 1, 4).reshape(1, 3, rows * crop, cols * crop)
        view = F.interpolate(whole, size=(crop, crop), mode="bicubic", align_corners=False)
        out[i, 0] = view[0]
    return out
