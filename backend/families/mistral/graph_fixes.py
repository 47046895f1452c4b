"""Mistral 3 vision fixes."""

from __future__ import annotations

import numpy as np

from mmforge.backend.errors import LayoutError
from mmforge.backend.families._graph_edit import GraphEdit, drop_dead
from mmforge.backend.families._hooks import FixRequest


def pixtral_rope_any_grid(request: FixRequest) -> str:
    """Mistral 3: compute the vision 2-D RoPE angles from the patch grid itself.

    mobius gathers cos/sin from a table indexed by `h * (image_size // patch) + w`, which
    is only right while the grid fits in image_size. The runtime resizes within a pixel
    budget, so a wide image has more columns than that and rows alias each other. HF
    (transformers 5) computes the angles from (h, w) directly: h·f[0::2] ‖ w·f[1::2].
    """
    models = request.models
    cfg = request.cfg
    import onnx_ir as ir

    graph = models["vision_encoder"].graph
    vision = cfg.sub("vision_config")
    head_dim = int(
        vision.get("head_dim") or vision.get("hidden_size") // vision.get("num_attention_heads")
    )
    theta = float(vision.get("rope_parameters.rope_theta", vision.get("rope_theta", 10000.0)))
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    f_h = inv_freq[0::2].astype(np.float32)
    f_w = inv_freq[1::2].astype(np.float32)

    gathers = {
        kind: node
        for node in graph
        if node.op_type == "Gather"
        for kind in ("cos", "sin")
        if node.inputs[0] is not None and node.inputs[0].name.endswith(f"rope.{kind}_cache")
    }
    if set(gathers) != {"cos", "sin"}:
        raise LayoutError("The Mistral 3 vision graph does not have the expected RoPE tables")
    try:
        flat = gathers["cos"].inputs[1].producer()  # Reshape(grid, [1, -1])
        grid = flat.inputs[0].producer()  # Add(Unsqueeze(h * width), Unsqueeze(w))
        rows = grid.inputs[0].producer().inputs[0].producer().inputs[0]  # Range(0, H)
        cols = grid.inputs[1].producer().inputs[0]  # Range(0, W)
        assert flat.op_type == "Reshape" and grid.op_type == "Add"
        assert rows.producer().op_type == "Range" and cols.producer().op_type == "Range"
    except (AttributeError, AssertionError, IndexError) as e:
        raise LayoutError("The Mistral 3 vision RoPE indexing has an unexpected form") from e

    dtype = gathers["cos"].outputs[0].dtype or ir.DataType.FLOAT
    edit = GraphEdit(graph)
    add, const = edit.add, edit.const

    freq_h = const("mmforge_pixtral_rope_freq_h", f_h.reshape(1, -1))
    freq_w = const("mmforge_pixtral_rope_freq_w", f_w.reshape(1, -1))
    axis1 = const("mmforge_pixtral_axis1", np.array([1], dtype=np.int64))
    axis0 = const("mmforge_pixtral_axis0", np.array([0], dtype=np.int64))
    quarter = const("mmforge_pixtral_quarter", np.array([len(f_h)], dtype=np.int64))
    flat_shape = const(
        "mmforge_pixtral_flat_shape", np.array([1, -1, head_dim // 2], dtype=np.int64)
    )

    h = add("Cast", [rows], to=ir.DataType.FLOAT)
    w = add("Cast", [cols], to=ir.DataType.FLOAT)
    ang_h = add("Mul", [add("Unsqueeze", [h, axis1]), freq_h])  # [H, q]
    ang_w = add("Mul", [add("Unsqueeze", [w, axis1]), freq_w])  # [W, q]
    shape = add("Concat", [add("Shape", [rows]), add("Shape", [cols]), quarter], axis=0)
    grid_h = add("Expand", [add("Unsqueeze", [ang_h, axis1]), shape])  # [H, W, q]
    grid_w = add("Expand", [add("Unsqueeze", [ang_w, axis0]), shape])  # [H, W, q]
    angles = add("Reshape", [add("Concat", [grid_h, grid_w], axis=-1), flat_shape])
    results = {"cos": add("Cos", [angles]), "sin": add("Sin", [angles])}
    if dtype != ir.DataType.FLOAT:
        results = {k: add("Cast", [v], to=dtype) for k, v in results.items()}
    edit.insert_before(gathers["cos"])
    for kind, node in gathers.items():
        node.outputs[0].replace_all_uses_with(results[kind])
        graph.remove(node, safe=True)
    drop_dead(models["vision_encoder"])
    return "Mistral 3 vision: RoPE angles computed from the patch grid (any image size)"
