"""The precision policy: f16 only where a probe run shows it safe, laptop-sized int4/int8."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from mmforge.backend.convert import convert
from mmforge.backend.errors import MmforgeError

SCALE = 1e6  # an MLP's inner activation this many times larger: far beyond f16's 65504


def _scaled(tiny, tmp_path: Path, prefix: str) -> Path:
    """The tiny Qwen2.5-VL with one MLP's up-projection ×SCALE and its down-projection ÷SCALE.

    The model computes the same function (the MLP is linear in its up branch), but the
    activation between the two overflows float16.
    """
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / f"scaled-{prefix.replace('.', '-')}"
    shutil.copytree(tiny("qwen2_5_vl"), folder)
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    for name in list(tensors):
        if name.startswith(f"{prefix}.up_proj."):
            tensors[name] = (tensors[name].astype(np.float32) * SCALE).astype(tensors[name].dtype)
        elif name == f"{prefix}.down_proj.weight":
            tensors[name] = (tensors[name].astype(np.float32) / SCALE).astype(tensors[name].dtype)
    save_file(tensors, str(path), metadata={"format": "pt"})
    return folder


def _initializer_types(path: Path) -> set[int]:
    model = onnx.load(str(path), load_external_data=False)
    return {t.data_type for t in model.graph.initializer if len(t.dims) >= 2}


def _first_logits(package: Path) -> np.ndarray:
    """The logits of the first generated token on the probe prompt, as the runtime gives them."""
    from mmforge import resources
    from mmforge.backend.runtime import Runtime

    runtime = Runtime(package)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}]
    inputs = runtime.process(runtime.prompt(messages), [resources.probe_image()])
    params = runtime.og.GeneratorParams(runtime.model)
    params.set_search_options(max_length=len(inputs.input_ids) + 1, do_sample=False)
    generator = runtime.og.Generator(runtime.model, params)
    generator.set_inputs(inputs.named)
    generator.generate_next_token()
    return np.asarray(generator.get_output("logits"), dtype=np.float32)


@pytest.mark.parametrize("dtype", ["f16", "int4"])
def test_an_encoder_that_overflows_f16_is_kept_in_f32_and_named(tiny, tmp_path, dtype):
    """In f16 the vision MLP's activation is inf: the package would hand NaN features to the
    decoder (its logits NaN, `<pad>` forever). The probe run finds it, the encoder is
    written in float32, and the manifest and notes say so."""
    folder = _scaled(tiny, tmp_path, "visual.blocks.0.mlp")
    out = tmp_path / f"pkg-{dtype}"
    manifest = convert(str(folder), out, dtype=dtype)
    assert manifest.precisions["vision_encoder"] == "f32"
    assert any("vision_encoder kept in f32" in n and "65504" in n for n in manifest.notes)
    assert _initializer_types(out / "vision.onnx") == {onnx.TensorProto.FLOAT}
    assert np.isfinite(_first_logits(out)).all()
    saved = json.loads((out / "mmforge_manifest.json").read_text())
    assert saved["precisions"]["vision_encoder"] == "f32"


def test_an_f16_decoder_that_overflows_is_refused(tiny, tmp_path):
    folder = _scaled(tiny, tmp_path, "model.layers.0.mlp")
    with pytest.raises(MmforgeError, match="overflows float16") as caught:
        convert(str(folder), tmp_path / "pkg", dtype="f16")
    assert "Convert at int4, int8 or f32" in caught.value.hint
    assert not (tmp_path / "pkg").exists()
    # int4 computes the decoder in float32: the same checkpoint converts and runs.
    manifest = convert(str(folder), tmp_path / "int4", dtype="int4")
    assert manifest.precisions["decoder"] == "int4"
    assert np.isfinite(_first_logits(tmp_path / "int4")).all()


@pytest.mark.parametrize("dtype", ["int4", "int8"])
def test_quantized_packages_hold_f16_encoders_and_a_quantized_token_table(package, dtype):
    out = package("qwen2_5_vl", dtype)
    manifest = json.loads((out / "mmforge_manifest.json").read_text())
    bits = 4 if dtype == "int4" else 8
    assert manifest["precisions"] == {
        "decoder": dtype,
        "vision_encoder": "f16",
        "embedding": dtype,
    }
    assert _initializer_types(out / "vision.onnx") == {onnx.TensorProto.FLOAT16}
    vision = onnx.load(str(out / "vision.onnx"), load_external_data=False)
    floats = {onnx.TensorProto.FLOAT}
    assert {i.type.tensor_type.elem_type for i in vision.graph.input} - {7} == floats
    assert {o.type.tensor_type.elem_type for o in vision.graph.output} == floats
    embedding = onnx.load(str(out / "embedding.onnx"), load_external_data=False)
    (node,) = [n for n in embedding.graph.node if n.op_type == "GatherBlockQuantized"]
    assert {a.name: a.i for a in node.attribute}["bits"] == bits
    tables = {t.name for t in embedding.graph.initializer if len(t.dims) == 2}
    assert not [n for n in embedding.graph.node if n.op_type == "Gather" and n.input[0] in tables]
    f32 = package("qwen2_5_vl", "f32")
    for name in ("vision.onnx.data", "embedding.onnx.data"):
        assert (out / name).stat().st_size < 0.55 * (f32 / name).stat().st_size


def test_encoders_stay_f32_when_asked(tiny, tmp_path):
    manifest = convert(str(tiny("qwen2_5_vl")), tmp_path / "pkg", dtype="int4", encoders="f32")
    assert manifest.precisions["vision_encoder"] == "f32"
    assert _initializer_types(tmp_path / "pkg" / "vision.onnx") == {onnx.TensorProto.FLOAT}
    with pytest.raises(MmforgeError, match="Unknown encoder precision"):
        convert(str(tiny("qwen2_5_vl")), tmp_path / "other", dtype="int4", encoders="bf16")


def test_inspect_predicts_the_int4_layout(tmp_path):
    """Qwen2.5-VL-3B's shapes (config only, meta device): f16 vision, 4-bit token table."""
    import transformers as T

    from mmforge.backend.inspect import inspect_source

    config = T.Qwen2_5_VLConfig(
        text_config={
            "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
            "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936,
            "tie_word_embeddings": True,
        },
        vision_config={"depth": 32, "hidden_size": 1280, "intermediate_size": 3420,
                       "out_hidden_size": 2048, "num_heads": 16},
        tie_word_embeddings=True,
    )  # fmt: skip
    config.save_pretrained(tmp_path / "q3b")
    sizes = inspect_source(str(tmp_path / "q3b")).sizes
    vision = sizes.parameters["vision_encoder"]
    table = sizes.parameters["embedding"]
    int4 = sizes.package_bytes["int4"]
    assert int4 < 3.5e9
    # Before: the vision encoder and the token table in float32, and the tied output layer's
    # 4-bit copy, 5.92 GB measured (benchmarks/scale.py); now the encoder at 2 bytes, the
    # table at 4-bit blocks (0.625 bytes), stored once for the embedding and the output layer.
    before = int4 + vision * 2 + table * (4 - 0.625) + table * 0.625
    assert before == pytest.approx(5.92e9, rel=0.04)
    # Each session loads the shared blocks, and the runtime computes the f16 encoder in
    # float32: memory counts both.
    assert sizes.memory_bytes["int4"] > int4 + vision * 2 + table * 0.625
    # int8 adds half a byte per quantized weight: the decoder's matrices, and the tied table
    # once (the decoder's parameters count its output layer; twice would be 10 % more).
    gap = sizes.package_bytes["int8"] - int4
    assert gap == pytest.approx(sizes.parameters["decoder"] * 0.5, rel=0.01)
