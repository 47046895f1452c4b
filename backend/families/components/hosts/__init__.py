"""What a runtime pipeline that hosts other models asks of every family it hosts.

- `videochat`: ONNX Runtime GenAI's `videochat_flash_qwen` (LLaVA, Idefics2, Idefics3 /
  SmolVLM, InternVL): the package fields, the pixel chain, the embedding graph and
  verify's pixels;
- `qwen`: the Qwen-VL pipelines' runtime inputs as transformers' (Qwen2.5-VL, Qwen3-VL,
  GLM-4V on `qwen2_5_vl`).
"""
