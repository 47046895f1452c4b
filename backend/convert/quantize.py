"""int4 / int8 weight-only quantization of the decoder's MatMuls (MatMulNBits).

Each MatMul whose weight is a 2-D initializer becomes a MatMulNBits (4 or 8 bits, block
32, symmetric, accuracy level 4), as onnxruntime's MatMulNBitsQuantizer makes it, with the
same kernels doing the arithmetic (`quantize_matmul_4bits` / `_8bits`). The difference
is when: the quantizer takes the whole decoder in memory (about 20 GB at peak for a 3B model),
while here each weight is quantized as the writer reaches it, one tensor at a time, so
the peak follows the largest weight.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from mmforge.backend.jobs import JobContext
from mmforge.backend.precisions import BLOCK_SIZE

ACCURACY_LEVEL = 4
# Weight elements quantized per block of output columns (64 MB of float32).
_COLUMN_BLOCK = 16 * 1024 * 1024
# The writer runs a thread per core; one weight at a time is held in f32 for quantizing
# (the kernel itself is multi-threaded), so the peak is the largest weight, once.
_ONE_AT_A_TIME = threading.Lock()


def quantize_decoder(model: Any, ctx: JobContext, bits: int = 4) -> Any:
    """Replace the decoder's weight MatMuls by MatMulNBits whose weights quantize lazily.

    Args:
        model: The decoder (onnx_ir), with its float32 weights.
        ctx: Progress.
        bits: 4 (int4) or 8 (int8).

    Returns the same onnx_ir model, edited in place.
    """
    import onnx_ir as ir

    per_byte = 8 // bits
    ctx.report("quantize", 0, 1, message=f"{bits}-bit MatMulNBits on the decoder", force=True)
    graph = model.graph
    count = 0
    for node in list(graph):
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
            continue
        weight = node.inputs[1]
        if weight is None or weight.const_value is None or weight.name not in graph.initializers:
            continue
        shape = weight.const_value.shape
        if len(shape) != 2 or weight.const_value.dtype != ir.DataType.FLOAT:
            continue
        rows, cols = int(shape[0]), int(shape[1])
        blocks = (rows + BLOCK_SIZE - 1) // BLOCK_SIZE
        source = _Quantized(weight.const_value, rows, cols, blocks, bits)
        packed = _initializer(
            graph,
            f"{weight.name}_Q{bits}",
            source.packed,
            ir.DataType.UINT8,
            [cols, blocks, BLOCK_SIZE // per_byte],
        )
        scales = _initializer(
            graph, f"{weight.name}_scales", source.scales, ir.DataType.FLOAT, [cols, blocks]
        )
        replacement = ir.node(
            "MatMulNBits",
            inputs=[node.inputs[0], packed, scales],
            attributes={
                "K": rows,
                "N": cols,
                "bits": bits,
                "block_size": BLOCK_SIZE,
                "accuracy_level": ACCURACY_LEVEL,
            },
            domain="com.microsoft",
            name=f"{node.name}_Q{bits}" if node.name else None,
        )
        graph.insert_before(node, replacement)
        node.outputs[0].replace_all_uses_with(replacement.outputs[0], replace_graph_outputs=True)
        replacement.outputs[0].name = node.outputs[0].name
        graph.remove(node, safe=True)
        if not weight.uses():
            del graph.initializers[weight.name]
        count += 1
    model.opset_imports.setdefault("com.microsoft", 1)
    ctx.report("quantize", 1, 1, message=f"{count} MatMuls to MatMulNBits")
    return model


class _Quantized:
    """One weight's 4- or 8-bit blocks and scales, computed once when the writer first asks.

    The writer asks for the packed blocks and the scales of the same weight, in either
    order and maybe on two threads; the first ask computes both, and the result is
    dropped once both are out. One weight's f32 copy is in memory at a time.
    """

    def __init__(self, weight: Any, rows: int, cols: int, blocks: int, bits: int = 4):
        self.weight = weight
        self.bits = bits
        self.rows, self.cols, self.blocks = rows, cols, blocks
        self._result: tuple[np.ndarray, np.ndarray] | None = None
        self._taken = 0

    def _compute(self) -> tuple[np.ndarray, np.ndarray]:
        from onnxruntime.capi import _pybind_state as kernels

        from mmforge.backend.convert.weights import uncopied

        with _ONE_AT_A_TIME:
            if self._result is not None:
                return self._result
            # The weight as [K, N], maybe a transposed view of the checkpoint's [N, K]:
            # quantized in blocks of output columns, each made contiguous on its own, so
            # the peak is the weight once (plus one block), not the weight and its copy.
            source = uncopied(self.weight).numpy()
            per_byte = 8 // self.bits
            packed = np.zeros((self.cols, self.blocks, BLOCK_SIZE // per_byte), dtype=np.uint8)
            scales = np.zeros((self.cols, self.blocks), dtype=np.float32)
            quantize = getattr(kernels, f"quantize_matmul_{self.bits}bits")
            step = max(1, _COLUMN_BLOCK // max(self.rows, 1))
            pad = self.blocks * BLOCK_SIZE - self.rows
            for start in range(0, self.cols, step):
                stop = min(start + step, self.cols)
                fp32 = np.ascontiguousarray(source[:, start:stop], dtype=np.float32)
                if pad:
                    fp32 = np.pad(fp32, ((0, pad), (0, 0)))
                part_packed = np.zeros((stop - start, *packed.shape[1:]), dtype=np.uint8)
                part_scales = np.zeros((stop - start, self.blocks), dtype=np.float32)
                zero_points = np.zeros((stop - start) * self.blocks, dtype=np.uint8)
                quantize(
                    part_packed,
                    fp32,
                    part_scales,
                    zero_points,
                    BLOCK_SIZE,
                    stop - start,
                    self.rows,
                    True,
                )
                packed[start:stop], scales[start:stop] = part_packed, part_scales
            del source
            self._result = (packed, scales)
            return self._result

    def _take(self, index: int) -> np.ndarray:
        result = self._compute()[index]
        with _ONE_AT_A_TIME:
            self._taken += 1
            if self._taken >= 2:
                self._result, self.weight = None, None  # both written: let them go
        return result

    def packed(self) -> np.ndarray:
        """The blocks, [N, blocks, 16] (4-bit) or [N, blocks, 32] (8-bit)."""
        return self._take(0)

    def scales(self) -> np.ndarray:
        """The blocks' scales, [N, blocks]."""
        return self._take(1)


def _initializer(graph: Any, name: str, make: Any, dtype: Any, shape: list[int]) -> Any:
    import onnx_ir as ir

    def load() -> Any:
        return ir.tensor(make(), name=name)

    value = ir.Value(
        name=name,
        shape=ir.Shape(shape),
        type=ir.TensorType(dtype),
        const_value=ir.LazyTensor(load, dtype=dtype, shape=ir.Shape(shape), name=name),
    )
    graph.register_initializer(value)
    return value
