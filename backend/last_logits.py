"""The decoder computes the logits of the last position only; verify's copy computes all.

ONNX Runtime GenAI samples from the last position's logits. A decoder whose `logits`
output is declared [batch, 1, vocab] is "pruned" (model.cpp, `Model::IsPruned`:
the output shape's second dimension is 1) and the runtime then reads that row as it is
(logits.cpp, `trimmed_prefill_logits_`). Built as transformers writes it, the output layer
multiplies every prompt position by a [hidden, vocab] matrix: for a 2,000-token prompt
and a 151,936-token vocabulary that is most of the prefill's arithmetic, all of it thrown
away but one row. So the package's decoder takes the last position of the final hidden
states (a Slice named `PRUNE`) before the output layer.

verify compares every position's logits with transformers', so it opens the decoder
without that Slice (`unpruned`): the same graph and weights, the output layer on every
position.
"""

from __future__ import annotations

from typing import Any

import numpy as np

PRUNE = "mmforge_last_position"
# Ops between the output layer and `logits` that act on each value alone (softcapping,
# a cast, a bias), when their other inputs are constants.
_ELEMENTWISE = {"Mul", "Div", "Tanh", "Add", "Sub", "Cast"}
_OUTPUT_LAYER = {"MatMul", "Gemm", "MatMulNBits"}
LOGITS = "logits"


def prune(model: Any) -> bool:
    """Make an onnx_ir decoder compute only the last position's logits (in place).

    Returns False, changing nothing, where the graph does not end in an output layer
    over [batch, sequence, hidden] followed by constant elementwise ops.
    """
    import onnx_ir as ir

    graph = model.graph
    out = next((v for v in graph.outputs if v.name == LOGITS), None)
    if out is None or (out.shape is not None and len(out.shape) != 3):
        return False
    node = out.producer()
    while node is not None and node.op_type in _ELEMENTWISE:
        moving = [v for v in node.inputs if v is not None and not _constant(v)]
        if len(moving) != 1:
            return False
        node = moving[0].producer()
    if node is None or node.op_type not in _OUTPUT_LAYER:
        return False
    if node.domain not in ("", "com.microsoft"):
        return False
    if any(n.name == PRUNE for n in graph):
        return False
    hidden = node.inputs[0]
    if hidden is None:
        return False

    def const(values: list[int], name: str) -> Any:
        value = ir.Value(
            name=f"{PRUNE}_{name}",
            type=ir.TensorType(ir.DataType.INT64),
            shape=ir.Shape([len(values)]),
            const_value=ir.tensor(np.array(values, np.int64)),
        )
        graph.register_initializer(value)
        return value

    last = ir.node(
        "Slice",
        inputs=[hidden, const([-1], "start"), const([2**62], "end"), const([1], "axis")],
        name=PRUNE,
    )
    graph.insert_before(node, last)
    node.replace_input_with(0, last.outputs[0])
    if out.type is None:  # graphs mmforge writes name their outputs without a type
        out.type = hidden.type or ir.TensorType(ir.DataType.FLOAT)
    declare(model)
    return True


def declare(model: Any) -> None:
    """Declare a pruned onnx_ir decoder's `logits` [batch, 1, vocab] again (in place).

    The runtime reads the declared shape (`Model::IsPruned`); passes that rebuild the
    graph's outputs (quantization) may leave the dimension open.
    """
    import onnx_ir as ir

    graph = model.graph
    out = next((v for v in graph.outputs if v.name == LOGITS), None)
    if out is None or not any(n.name == PRUNE for n in graph):
        return
    dims = list(out.shape) if out.shape is not None and len(out.shape) == 3 else None
    batch = dims[0] if dims else "batch"
    vocab = dims[2] if dims else "vocab"
    if out.type is None:  # the producer computes in its first input's type
        producer = out.producer()
        first = producer.inputs[0] if producer is not None and producer.inputs else None
        out.type = (first.type if first is not None else None) or ir.TensorType(ir.DataType.FLOAT)
    out.shape = ir.Shape([batch, 1, vocab])


def _constant(value: Any) -> bool:
    """An initializer, or a Constant node's output."""
    if value.is_initializer() or value.const_value is not None:
        return True
    producer = value.producer()
    return producer is not None and producer.op_type == "Constant"


def unpruned(path: Any) -> Any:
    """The decoder at `path` as an onnx ModelProto computing every position's logits.

    None when it is not pruned (open the file as it is). Its external data stays beside
    `path`: open it with `session.model_external_initializers_file_folder_path` set.
    """
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    cut = next((n for n in graph.node if n.name == PRUNE), None)
    if cut is None:
        return None
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == cut.output[0]:
                node.input[i] = cut.input[0]
    graph.node.remove(cut)
    for output in graph.output:
        if output.name == LOGITS:
            output.type.tensor_type.shape.dim[1].dim_param = "sequence_length"
    return model
