"""The conversion pipeline: checkpoint → ONNX Runtime GenAI package.

- `job`: the `convert` job itself (stages, staging folder, atomic publish);
- `graphs`: mobius-onnx as the graph engine, behind one module;
- `weights`: the weight plan and its report, then reading and applying tensors;
- `quantize`: int4 for the decoder;
- `package`: everything written beside the ONNX files (genai_config, processor JSON,
  tokenizer, reports);
- `validate`: the runtime check at the end.
"""

from mmforge.backend.convert.job import MANIFEST, Manifest, check_output, convert

__all__ = ["MANIFEST", "Manifest", "check_output", "convert"]
