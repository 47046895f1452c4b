"""int4 weight-only quantization of the decoder's MatMuls (onnxruntime's MatMulNBits)."""

from __future__ import annotations

from typing import Any

from mmforge.backend.jobs import JobContext

BLOCK_SIZE = 32


def quantize_decoder(model: Any, ctx: JobContext) -> Any:
    """Quantize every MatMul weight of the decoder to 4 bits (block 32, symmetric).

    Uses onnxruntime's own quantizer rather than a new one. Returns a new onnx_ir model.
    """
    import onnx_ir as ir
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    ctx.report("quantize", 0, 1, message="int4 MatMulNBits on the decoder", force=True)
    for value in model.graph.initializers.values():
        # A graph read from a file (LFM2's builder decoder) points at its .data file by a
        # relative path the quantizer cannot resolve: read those weights first.
        if isinstance(value.const_value, ir.ExternalTensor):
            value.const_value = ir.tensor(value.const_value.numpy(), name=value.name)
    proto = ir.serde.serialize_model(model)
    quantizer = MatMulNBitsQuantizer(
        proto, block_size=BLOCK_SIZE, is_symmetric=True, accuracy_level=4
    )
    quantizer.process()
    ctx.report("quantize", 1, 1)
    return ir.serde.deserialize_model(quantizer.model.model)
