"""Small helpers for editing onnx_ir graphs."""

from __future__ import annotations

from typing import Any

import numpy as np


class GraphEdit:
    """Collects new nodes and constants for one graph edit."""

    def __init__(self, graph: Any):
        self.graph = graph
        self.nodes: list[Any] = []

    def add(self, op: str, inputs: list[Any], **attrs: Any) -> Any:
        """A new node (not yet inserted); returns its first output."""
        import onnx_ir as ir

        node = ir.node(op, inputs=inputs, attributes=attrs)
        self.nodes.append(node)
        return node.outputs[0]

    def const(self, name: str, array: np.ndarray) -> Any:
        """An initializer, shared by name."""
        return initializer(self.graph, name, array)

    def insert_before(self, anchor: Any) -> None:
        """Insert every collected node, in order, before `anchor`."""
        for node in self.nodes:
            self.graph.insert_before(anchor, node)


def drop_dead(model: Any) -> None:
    """Remove the nodes and initializers a fix left without consumers."""
    from onnx_ir.passes.common import RemoveUnusedNodesPass

    RemoveUnusedNodesPass()(model)
    graph = model.graph
    for name, value in list(graph.initializers.items()):
        if not value.uses() and not value.is_graph_output():
            del graph.initializers[name]


def is_constant(value: Any) -> bool:
    """Whether a value is an initializer or a Constant node's output."""
    if value is None:
        return False
    source = value.producer()
    return value.const_value is not None or (source is not None and source.op_type == "Constant")


def initializer(graph: Any, name: str, array: np.ndarray) -> Any:
    """An initializer of `graph`, created once per name."""
    import onnx_ir as ir

    if name in graph.initializers:
        return graph.initializers[name]
    value = ir.Value(name=name, const_value=ir.tensor(array, name=name))
    graph.register_initializer(value)
    return value


def name_decoder_weights(graph: Any, text: str, head: str) -> int:
    """Give a mobius decoder's weights the checkpoint's names; the count renamed.

    mobius names them `decoder.model.*` and `decoder.lm_head.weight`; a checkpoint puts
    its language model under `text` (`language_model.model.`) and its head at `head`.
    Its computed constants (rotary tables) keep their names.
    """
    renamed = 0
    for name, value in list(graph.initializers.items()):
        if value.const_value is not None:
            continue  # mobius's constants (rotary tables): computed, not weights
        if name.startswith("decoder.model."):
            new = text + name[len("decoder.model.") :]
        elif name == "decoder.lm_head.weight":
            new = head
        else:
            continue
        del graph.initializers[name]
        value.name = new
        graph.initializers[new] = value
        renamed += 1
    return renamed
