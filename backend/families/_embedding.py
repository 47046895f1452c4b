"""Fixes to the embedding graph shared by every family."""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import LayoutError
from mmforge.backend.families._graph_edit import initializer
from mmforge.backend.families._hooks import FixRequest


def text_embedding_without_features(request: FixRequest) -> str | None:
    """Keep the token embedding for placeholder ids when no features come with them.

    mobius's InputMixer writes zero vectors at every placeholder id when the feature input
    is empty, as on every decode step. HF replaces placeholders only when pixel values
    (or audio) are given, so a generated placeholder token embeds as text there. Each
    replacement condition gets "and its feature input is not empty" added.
    """
    models = request.models
    import onnx_ir as ir

    graph = models["embedding"].graph
    feature_inputs = {v.name: v for v in graph.inputs if v.name.endswith("_features")}
    if not feature_inputs:
        return None
    changed = 0
    for where in [n for n in graph if n.op_type == "Where"]:
        condition = where.inputs[0]
        producer = condition.producer() if condition is not None else None
        source = producer.inputs[0].producer() if producer is not None else None
        if producer is None or producer.op_type != "Unsqueeze" or source is None:
            continue
        if source.op_type != "Equal" or source.inputs[0].name != "input_ids":
            continue
        features = _feature_source(where.inputs[1], feature_inputs)
        if features is None:
            raise LayoutError("An embedding replacement draws from no known feature input")
        # Element count, not rows: batched features arrive as [images, tokens, hidden].
        count = ir.node("Size", inputs=[features])
        zero = initializer(graph, "mmforge_zero", np.array(0, dtype=np.int64))
        has = ir.node("Greater", inputs=[count.outputs[0], zero])
        both = ir.node("And", inputs=[condition, has.outputs[0]])
        for node in (count, has, both):
            graph.insert_before(where, node)
        where.replace_input_with(0, both.outputs[0])
        changed += 1
    if not changed:
        raise LayoutError("The embedding graph has no placeholder replacement to guard")
    return "Embedding: placeholder ids keep their text embedding when no features are given"


def _feature_source(value: Any, inputs: dict[str, Any], depth: int = 0) -> Any:
    """The feature graph input that `value` is computed from (breadth-limited search)."""
    if value is None or depth > 6:
        return None
    if value.name in inputs and value.producer() is None:
        return value
    producer = value.producer()
    if producer is None:
        return None
    for source in producer.inputs:
        found = _feature_source(source, inputs, depth + 1)
        if found is not None:
            return found
    return None
