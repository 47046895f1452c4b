"""The package precisions, in one place: their names, what they quantize, their sizes.

- f32: every graph in float32; exact.
- f16: every graph's weights in float16 (encoder inputs stay float32).
- int4 / int8: the decoder's MatMul weights as MatMulNBits (4 or 8 bits, blocks of 32,
  symmetric, one float32 scale per block) and the token table likewise, as
  GatherBlockQuantized (a tied table's bytes stored once, convert/tied.py); encoders in
  float16 where a probe run shows it safe, else float32 (convert/policy.py).
"""

from __future__ import annotations

DTYPES = ("f32", "f16", "int4", "int8")

# Bits of a quantized decoder weight, per quantized precision.
QUANTIZED_BITS = {"int4": 4, "int8": 8}

# The weights' bytes per parameter in a package (quantized: the decoder's matrices,
# their blocks plus a float32 scale per block of 32).
BLOCK_SIZE = 32
WEIGHT_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "int4": 0.5 + 4 / BLOCK_SIZE,
    "int8": 1.0 + 4 / BLOCK_SIZE,
}


def is_quantized(dtype: str) -> bool:
    """Whether a precision quantizes the decoder's matrices."""
    return dtype in QUANTIZED_BITS


def graph_dtype(dtype: str) -> str:
    """The float type the graphs are built in: quantized precisions quantize an f32 build."""
    return "f32" if is_quantized(dtype) else dtype
