"""GraphBuilder: a small op-by-op ONNX graph builder over onnx_ir, for the graphs we write.

Every graph mmforge writes itself (LFM2-VL's tower, PaliGemma's three graphs, the towers
and embeddings on `videochat_flash_qwen`, GLM-4V's, Gemma 3n's) is built with it: ONNX
opset 18, IR version 10, initializers named as the checkpoint's tensors (`weight`), so
that every weight goes through the common path (convert/weights.py). It needs onnx_ir,
imported when a builder is made.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

OPSET = 18

# transformers' activation names that are GELU with the tanh approximation.
GELU_TANH = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")


class GraphBuilder:
    """A small op-by-op builder over onnx_ir."""

    def __init__(self, name: str):
        import onnx_ir as ir

        self.ir = ir
        self.graph = ir.Graph(inputs=[], outputs=[], nodes=[], name=name, opset_imports={"": OPSET})
        self._root = self.graph  # where initializers live, also while a loop body is built
        self._consts = 0

    def input(self, name: str, dtype: Any, shape: list[Any]) -> Any:
        """A graph input."""
        value = self.ir.Value(name=name, type=self.ir.TensorType(dtype), shape=self.ir.Shape(shape))
        self.graph.inputs.append(value)
        return value

    def weight(self, name: str, shape: list[int]) -> Any:
        """An initializer the checkpoint fills (no value yet); the same one for the same name."""
        ir = self.ir
        known = self._root.initializers.get(name)
        if known is not None:
            if list(known.shape) != list(shape):
                raise ValueError(f"{name} is asked for as {shape}, already {list(known.shape)}")
            return known
        value = ir.Value(
            name=name, type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(list(shape))
        )
        self._root.initializers[name] = value  # register_initializer wants a value
        return value

    def const(self, array: Any) -> Any:
        """A constant initializer."""
        self._consts += 1
        name = f"mmforge_const_{self._consts}"
        value = self.ir.Value(name=name, const_value=self.ir.tensor(np.asarray(array), name=name))
        self._root.register_initializer(value)
        return value

    def op(self, op_type: str, *inputs: Any, **attrs: Any) -> Any:
        """Append a node; its first output.

        In a loop body, a node on initializers alone (a weight's Transpose) goes to the
        main graph: it is the same every iteration, and the converter's passes fold
        such nodes where they expect them, in the main graph.
        """
        node = self.ir.node(op_type, inputs=list(inputs), attributes=attrs)
        hoisted = self.graph is not self._root and all(
            v is not None and v.is_initializer() for v in inputs
        )
        (self._root if hoisted else self.graph).append(node)
        return node.outputs[0]

    def loop(self, count: Any, body: Callable[[Any], Any], name: str) -> Any:
        """ONNX Loop: `body(index)` for index 0 .. count - 1, its values stacked [count, ...].

        The body's nodes read the graph's values and initializers from the outer scope;
        `weight` and `const` still register on the main graph while it is built. Each
        iteration's value must have the same shape.
        """
        ir = self.ir
        index = ir.Value(
            name=f"{name}_i", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([])
        )
        cond = ir.Value(name=f"{name}_c", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
        graph = ir.Graph(inputs=[index, cond], outputs=[], nodes=[], name=name)
        outer, self.graph = self.graph, graph
        try:
            value = body(index)
            keep = self.op("Identity", cond)
        finally:
            self.graph = outer
        graph.outputs.extend([keep, value])
        # Names unique across the model (ONNX's single assignment covers subgraphs too).
        for k, node in enumerate(graph):
            for out in node.outputs:
                out.name = f"{name}_{k}_{out.index()}"
        go = self.const(np.array(True))  # no early exit (an empty input is dropped by passes)
        node = ir.node("Loop", inputs=[count, go], attributes={"body": graph}, num_outputs=1)
        outer.append(node)
        return node.outputs[0]

    def output(self, value: Any, name: str) -> None:
        """Name a value and make it a graph output."""
        value.name = name
        self.graph.outputs.append(value)

    def model(self) -> Any:
        """The finished model."""
        return self.ir.Model(self.graph, ir_version=10, producer_name="mmforge")

    # Layers -------------------------------------------------------------------------

    def linear(self, x: Any, prefix: str, n_in: int, n_out: int, bias: bool = True) -> Any:
        """X @ weightᵀ (+ bias), with the checkpoint's weight names."""
        w = self.weight(prefix + ".weight", [n_out, n_in])
        y = self.op("MatMul", x, self.op("Transpose", w, perm=[1, 0]))
        return self.op("Add", y, self.weight(prefix + ".bias", [n_out])) if bias else y

    def layer_norm(self, x: Any, prefix: str, size: int, eps: float) -> Any:
        """LayerNormalization with the checkpoint's weight names."""
        scale = self.weight(prefix + ".weight", [size])
        return self.op(
            "LayerNormalization",
            x,
            scale,
            self.weight(prefix + ".bias", [size]),
            epsilon=eps,
            axis=-1,
        )

    def gelu(self, x: Any, tanh: bool) -> Any:
        """GELU, exact or with the tanh approximation."""
        half_x = self.op("Mul", x, self.const(np.float32(0.5)))
        if tanh:  # gelu_pytorch_tanh
            cube = self.op("Mul", self.op("Mul", x, x), x)
            inner = self.op("Add", x, self.op("Mul", cube, self.const(np.float32(0.044715))))
            t = self.op(
                "Tanh", self.op("Mul", inner, self.const(np.float32(math.sqrt(2 / math.pi))))
            )
        else:
            t = self.op("Erf", self.op("Mul", x, self.const(np.float32(1 / math.sqrt(2)))))
        return self.op("Mul", half_x, self.op("Add", t, self.const(np.float32(1.0))))

    def slice(self, x: Any, start: int, end: int, axis: int) -> Any:
        """x[start:end] along one axis."""
        return self.op(
            "Slice", x, self.const(np.array([start])), self.const(np.array([end])),
            self.const(np.array([axis])),
        )  # fmt: skip
