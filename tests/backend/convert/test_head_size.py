"""A decoder head size ONNX Runtime's GroupQueryAttention refuses gets the portable attention.

The runtime's rule is measured here on the installed onnxruntime (a one-node graph), so an
upgrade that changes it shows; then a LLaVA whose head size is 24 (width 48 over 2 heads),
which mobius fuses with the rotary inside GroupQueryAttention, converts, verifies and
answers as transformers does. Before the rule it converted to a package the runtime refused
("head_size shall be a multiple of 16").
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mmforge.backend.convert import attention_rule
from mmforge.backend.families import Cfg


def _gqa(head: int, rotary: bool) -> str | None:
    """Run one GroupQueryAttention node (2 heads, 1 key/value head); the refusal, if any."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    f = TensorProto.FLOAT
    shapes = {
        "q": [1, 3, 2 * head],
        "k": [1, 3, head],
        "v": [1, 3, head],
        "pk": [1, 1, 0, head],
        "pv": [1, 1, 0, head],
    }
    inputs = [helper.make_tensor_value_info(n, f, s) for n, s in shapes.items()]
    inputs += [
        helper.make_tensor_value_info("seqlens", TensorProto.INT32, [1]),
        helper.make_tensor_value_info("total", TensorProto.INT32, []),
    ]
    feed: dict[str, np.ndarray] = {n: np.ones(s, np.float32) for n, s in shapes.items()}
    feed["seqlens"], feed["total"] = np.array([2], np.int32), np.array(3, np.int32)
    attrs: dict[str, int] = {}
    if rotary:
        inputs += [helper.make_tensor_value_info(n, f, [8, head // 2]) for n in ("cos", "sin")]
        feed["cos"], feed["sin"] = (
            np.ones((8, head // 2), np.float32),
            np.zeros((8, head // 2), np.float32),
        )
        attrs["do_rotary"] = 1
    node = helper.make_node(
        "GroupQueryAttention",
        [i.name for i in inputs],
        ["out", "present_k", "present_v"],
        domain="com.microsoft",
        num_heads=2,
        kv_num_heads=1,
        **attrs,
    )
    outputs = [helper.make_tensor_value_info(n, f, None) for n in node.output]
    graph = helper.make_graph([node], "gqa", inputs, outputs)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    options = ort.SessionOptions()
    options.log_severity_level = 4  # the refusal is the answer, not an error to log
    session = ort.InferenceSession(
        helper.make_model(graph, opset_imports=opsets).SerializeToString(),
        options,
        providers=["CPUExecutionProvider"],
    )
    try:
        session.run(None, feed)
    except Exception as e:  # noqa: BLE001 - onnxruntime's own error type
        return str(e)
    return None


@pytest.mark.parametrize("head", [8, 12, 16, 20, 24, 40, 48, 64, 128, 264])
def test_the_runtimes_rule_is_the_one_mmforge_applies(head):
    """Multiples of 8; of 16 when the operator applies the rotary embedding itself."""
    for rotary, multiple in (
        (False, attention_rule.MULTIPLE),
        (True, attention_rule.ROTARY_MULTIPLE),
    ):
        said = _gqa(head, rotary)
        assert (said is None) == (head % multiple == 0), (head, rotary, said)
        if said is not None:  # the first check it fails names its own multiple
            assert "head_size must be a multiple of 8" in said or (
                rotary and "head_size shall be a multiple of 16" in said
            )


def test_head_size_is_head_dim_else_width_over_heads():
    head_size = attention_rule.head_size
    assert head_size(Cfg({"text_config": {"head_dim": 24, "hidden_size": 64}})) == 24
    text = {"hidden_size": 48, "num_attention_heads": 2, "head_dim": None}
    assert head_size(Cfg({"text_config": text})) == 24
    assert head_size(Cfg({"llm_config": {"hidden_size": 96, "num_attention_heads": 4}})) == 24
    assert head_size(Cfg({"hidden_size": 80, "num_attention_heads": 2})) == 40
    assert head_size(Cfg({"vision_config": {"hidden_size": 32}})) is None


HEAD_24 = {
    "text_config.hidden_size": 48,
    "text_config.num_attention_heads": 2,
    "text_config.num_key_value_heads": 1,
    "text_config.head_dim": 24,
}


def _write(family_key: str, overrides: dict, folder: Path) -> Path:
    from mmforge.backend.tiny import specs
    from mmforge.backend.tiny.build import with_config, write_tiny

    return write_tiny(with_config(specs()[family_key], overrides), folder).folder


def _decoder_ops(package: Path) -> set[str]:
    import onnx

    model = onnx.load(str(package / "decoder.onnx"), load_external_data=False)
    return {n.op_type for n in model.graph.node}


@pytest.fixture(scope="module")
def llava_24(tiny_root: Path, tmp_path_factory) -> tuple[Path, Path]:
    """A LLaVA with head size 24 and its package."""
    from mmforge.backend.convert import convert

    folder = _write("llava", HEAD_24, tiny_root / "llava-head-24")
    out = tmp_path_factory.mktemp("head24") / "pkg"
    convert(str(folder), out)
    return folder, out


def test_a_head_size_the_fusion_refuses_converts_with_the_portable_attention(llava_24):
    _, package = llava_24
    notes = json.loads((package / "mmforge_manifest.json").read_text())["notes"]
    said = [n for n in notes if n.startswith("Decoder attention:")]
    assert len(said) == 1 and "multiple of 16" in said[0] and "is 24" in said[0], notes
    ops = _decoder_ops(package)
    assert "GroupQueryAttention" not in ops and "Attention" in ops, ops


def test_it_verifies_and_chats_as_transformers(llava_24):
    from mmforge import resources
    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat import ChatSession, GenerationOptions
    from mmforge.backend.verify import hf_reference, verify

    folder, package = llava_24
    report = verify(package, str(folder), tokens=16)
    assert report.verdict == "PASS", [(c.name, c.verdict, c.reason) for c in report.components]
    assert report.tokens["matched"] == report.tokens["total"] == 16

    session = ChatSession(package)
    attachments = session.prepare_attachments([(resources.probe_image(), IMAGE)])
    answer = session.send("Describe this.", attachments, GenerationOptions(max_new_tokens=16))
    prompt = session.prompt_text(1)
    arrays = session.runtime.process(prompt, [a.path for a in attachments]).arrays
    arrays["input_ids"] = arrays["input_ids"].astype(np.int64)
    ref = hf_reference.from_runtime(folder, prompt, arrays)
    hf = hf_reference.greedy_generate(hf_reference.load_model(folder), ref, 16)
    assert len(set(hf)) >= 4, "a degenerate reference would prove nothing"
    ours, eos = answer.token_ids, session.info.eos_token_ids
    assert ours == hf[: len(ours)] and (len(ours) == 16 or ours[-1] in eos or hf[len(ours)] in eos)


@pytest.mark.parametrize(("head", "kept"), [(24, True), (20, False)])
def test_a_fusion_with_the_rotary_outside_is_held_to_multiples_of_8(tmp_path, head, kept):
    """Qwen2.5-VL's M-RoPE stays outside mobius's GroupQueryAttention: head size 24 keeps
    the fusion, 20 does not."""
    from mmforge.backend.checkpoint import Checkpoint
    from mmforge.backend.convert.graphs import build_graphs

    overrides = {
        **HEAD_24,
        "text_config.hidden_size": 2 * head,
        "text_config.head_dim": head,
        # M-RoPE's sections cover half a head; the tower projects to the decoder's width.
        "text_config.rope_parameters.mrope_section": [head // 2 - 8, 4, 4],
        "vision_config.out_hidden_size": 2 * head,
    }
    checkpoint = Checkpoint.read(_write("qwen2_5_vl", overrides, tmp_path / "qwen"))
    decoder = build_graphs(checkpoint, "f32", "cpu").models["decoder"]
    assert any(n.op_type == "GroupQueryAttention" for n in decoder.graph.all_nodes())
    said = attention_rule.refused(checkpoint.cfg, decoder)
    assert (said is None) == kept, said
    if said is not None:
        assert "multiple of 8" in said and "rotary" not in said
