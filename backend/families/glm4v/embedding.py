"""GLM-4V's embedding graph: token rows, with the picture features at the image ids.

input_ids [B, S] and image_features [N, H] (the vision graph's, in prompt order) →
inputs_embeds [B, S, H]: `embed_tokens` rows, each `image_token_id` position taking the next
feature row, as Glm4vModel.forward's masked_scatter does. Without features (a text-only
prompt, every decode step) an `image_token_id` embeds as text, as in transformers, which
replaces placeholders only when pixel values come with them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.families.components.graph_builder import GraphBuilder


def embedding_graph(
    vocab: int,
    hidden: int,
    image_token_id: int,
    table: str = "model.language_model.embed_tokens.weight",
) -> Any:
    """The embedding, its table under the checkpoint's name."""
    g = GraphBuilder("glm4v_embedding")
    ir = g.ir

    def i64(a: Any) -> Any:
        return g.const(np.array(a, dtype=np.int64))

    ids = g.input("input_ids", ir.DataType.INT64, ["batch", "sequence_len"])
    features = g.input("image_features", ir.DataType.FLOAT, ["num_feature_tokens", hidden])
    text = g.op("Gather", g.weight(table, [vocab, hidden]), ids, axis=0)
    # An image id takes a feature row only when features came (HF: only with pixel values).
    some = g.op("Greater", g.op("Gather", g.op("Shape", features), i64(0), axis=0), i64(0))
    is_image = g.op("And", g.op("Equal", ids, i64(image_token_id)), some)
    flat = g.op("Reshape", g.op("Cast", is_image, to=7), i64([-1]))
    order = g.op("Reshape", g.op("Sub", g.op("CumSum", flat, i64(0)), i64(1)), g.op("Shape", ids))
    # A zero row after the features, for prompts without pictures (no row to index).
    rows = g.op(
        "Concat",
        features,
        g.op("Expand", g.const(np.zeros((1, 1), np.float32)), i64([1, hidden])),
        axis=0,
    )
    order = g.op(
        "Where",
        is_image,
        order,
        g.op("Sub", g.op("Gather", g.op("Shape", rows), i64(0), axis=0), i64(1)),
    )
    picked = g.op("Gather", rows, order, axis=0)
    g.output(g.op("Where", g.op("Unsqueeze", is_image, i64([-1])), picked, text), "inputs_embeds")
    return g.model()
