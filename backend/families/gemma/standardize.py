"""Gemma 4's larger sizes: the vision features' standardisation (`vision_config.standardize`)."""

from __future__ import annotations

from mmforge.backend.errors import LayoutError
from mmforge.backend.families._hooks import FixRequest


def vision_standardize(request: FixRequest) -> str | None:
    """(pooled - std_bias) · std_scale before the projection's norm, as transformers does.

    transformers 5.24 (`Gemma4VisionModel.forward`) standardises the pooled features when
    `vision_config.standardize` is set (the 26B-A4B and 31B releases); mobius 0.1 builds
    no such step, and its weight renames give the two vectors the names used here.
    """
    models, cfg = request.models, request.cfg
    import onnx_ir as ir

    if not cfg.get("vision_config.standardize", False) or "vision_encoder" not in models:
        return None
    graph = models["vision_encoder"].graph
    norm = next(
        (n for n in graph if n.op_type == "RMSNormalization" and "projector_norm" in n.name),
        None,
    )
    if norm is None:
        raise LayoutError("The Gemma 4 vision graph has no projector norm to standardise before")
    pooled = norm.inputs[0]
    hidden = int(cfg.get("vision_config.hidden_size"))
    vectors = []
    for name in ("vision_encoder.encoder.std_bias", "vision_encoder.encoder.std_scale"):
        value = ir.Value(name=name, type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([hidden]))
        graph.initializers[name] = value  # filled from the checkpoint like any weight
        vectors.append(value)
    # In float32 whatever the graph's type, as transformers does (its std_bias cancels
    # large values), then back to the graph's type.
    nodes = []
    source = pooled
    low = pooled.dtype is not None and pooled.dtype != ir.DataType.FLOAT
    if low:
        nodes.append(ir.node("Cast", inputs=[pooled], attributes={"to": ir.DataType.FLOAT}))
        source = nodes[-1].outputs[0]
    nodes.append(ir.node("Sub", inputs=[source, vectors[0]]))
    nodes.append(ir.node("Mul", inputs=[nodes[-1].outputs[0], vectors[1]]))
    if low:
        nodes.append(
            ir.node("Cast", inputs=[nodes[-1].outputs[0]], attributes={"to": pooled.dtype})
        )
    for node in nodes:
        graph.insert_before(norm, node)
    norm.replace_input_with(0, nodes[-1].outputs[0])
    return (
        "Vision: the pooled features are standardised (std_bias, std_scale), as transformers does"
    )
