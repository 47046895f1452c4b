"""Bidirectional attention over an image's tokens (Gemma 3, Gemma 4)."""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import LayoutError
from mmforge.backend.families._graph_edit import GraphEdit, is_constant
from mmforge.backend.families._hooks import FixRequest


def bidirectional_image_attention(request: FixRequest, *, sliding_only: bool = False) -> str:
    """Gemma 3 and 4: image tokens of one image attend to each other in both directions.

    `sliding_only`: Gemma 4 (transformers 5.24, `create_causal_mask_mapping`) keeps its
    global layers causal and opens the image blocks on the sliding layers only.

    HF builds this from token_type_ids, which the runtime never passes to the decoder. The
    decoder gets an `input_ids` input instead (ORT GenAI 0.18 feeds it the prompt ids at
    prefill and one id per step) and builds the same mask from it: allowed = the causal
    mask OR (query and key are image tokens of the same image), inside the sliding window
    on local layers. Image numbers count begin-of-image tokens; past positions count as
    text, which is exact while the multimodal prefill runs in one pass (search.chunk_size
    unset).
    """
    models = request.models
    cfg = request.cfg
    import onnx_ir as ir

    graph = models["decoder"].graph
    image_id = int(cfg.first("image_token_index", "image_token_id"))
    boi_id = int(cfg.first("boi_token_index", "boi_token_id"))
    attention = [n for n in graph if n.op_type == "Attention"]
    if not attention:
        raise LayoutError("The decoder has no Attention nodes to make bidirectional")
    conditions = {}
    for node in attention:
        where = node.inputs[3].producer() if node.inputs[3] is not None else None
        while where is not None and where.op_type in ("Unsqueeze", "Cast"):
            where = where.inputs[0].producer()
        if where is None or where.op_type != "Where":
            raise LayoutError("The decoder's attention mask has an unexpected form")
        conditions[where.name] = where
    mask_input = next(v for v in graph.inputs if v.name == "attention_mask")
    ids = next((v for v in graph.inputs if v.name == "input_ids"), None)
    if ids is None:  # Gemma 4's decoder already takes input_ids (per-layer embeddings)
        ids = ir.Value(
            name="input_ids",
            type=ir.TensorType(ir.DataType.INT64),
            shape=ir.Shape([graph.inputs[0].shape[0], graph.inputs[0].shape[1]]),
        )
        graph.inputs.append(ids)
    edit = GraphEdit(graph)
    add, const = edit.add, edit.const

    image = const("mmforge_image_token_id", np.array(image_id, dtype=np.int64))
    boi = const("mmforge_boi_token_id", np.array(boi_id, dtype=np.int64))
    one = const("mmforge_axis_1", np.array(1, dtype=np.int64))
    axes1 = const("mmforge_axes_1", np.array([1], dtype=np.int64))
    axes2 = const("mmforge_axes_2", np.array([2], dtype=np.int64))

    is_image = add("Equal", [ids, image])  # [B, S]
    number = add("CumSum", [add("Cast", [add("Equal", [ids, boi])], to=ir.DataType.INT64), one])
    same = add("Equal", [add("Unsqueeze", [number, axes2]), add("Unsqueeze", [number, axes1])])
    both = add("And", [add("Unsqueeze", [is_image, axes2]), add("Unsqueeze", [is_image, axes1])])
    block = add("And", [same, both])  # [B, S, S]
    # Left-pad with "not allowed" for the past keys: [B, S, P + S].
    ids_shape = add("Shape", [ids])
    total = add("Shape", [mask_input], start=1, end=2)
    past = add("Sub", [total, add("Shape", [ids], start=1, end=2)])
    pad_shape = add("Concat", [ids_shape, past], axis=0)
    pad = add("ConstantOfShape", [pad_shape], value=ir.tensor(np.array([False])))
    extra = add("Concat", [pad, block], axis=2)
    keep = add("Cast", [add("Unsqueeze", [mask_input, axes1])], to=ir.DataType.BOOL)
    extra = add("And", [extra, keep])  # padding stays masked

    edit.insert_before(graph.node(min(graph.index(w) for w in conditions.values())))
    for where in conditions.values():
        allowed = extra
        window = _window_check(where.inputs[0])
        if sliding_only and window is None:
            continue
        if window is not None:
            # Sliding layers: HF keeps the window on the image block too,
            # AND(window, OR(causal, block)).
            limit = ir.node("And", inputs=[extra, window])
            graph.insert_before(where, limit)
            allowed = limit.outputs[0]
        combined = ir.node("Or", inputs=[where.inputs[0], allowed])
        graph.insert_before(where, combined)
        where.replace_input_with(0, combined.outputs[0])
    for node in attention:
        node.attributes["is_causal"] = ir.AttrInt64("is_causal", 0)
    return (
        "Decoder: image tokens attend bidirectionally within their image, the mask built "
        "from input_ids (the runtime never passes token_type_ids)"
    )


def _window_check(condition: Any, depth: int = 0) -> Any:
    """The `q - k < window` boolean inside a sliding-window mask condition, if any."""
    producer = condition.producer() if condition is not None else None
    if producer is None or depth > 8:
        return None
    if producer.op_type == "Less" and is_constant(producer.inputs[1]):
        return producer.outputs[0]
    for source in producer.inputs:
        found = _window_check(source, depth + 1)
        if found is not None:
            return found
    return None
