"""Fara (microsoft/Fara-7B): a Qwen2.5-VL fine-tune packaged as the runtime's `fara` type.

The release-shaped checkpoint carries Fara-7B's config.json text (model_type qwen2_5_vl,
transformers 4.52's flat-and-nested layout, untied embeddings), shrunk; its folder's name
says Fara, as a hub download's cache path does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmforge import resources
from mmforge.backend.attachments import IMAGE
from mmforge.backend.chat import ChatSession, GenerationOptions
from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.convert import convert
from mmforge.backend.families import VariantRequest, lookup
from mmforge.backend.families.qwen.fara import names_fara
from mmforge.backend.inspect import inspect_source
from mmforge.backend.tiny.release import write_release
from mmforge.backend.verify import hf_reference, verify

_built: dict[str, Path] = {}


@pytest.fixture(scope="module")
def fara(tiny_root: Path, tmp_path_factory) -> tuple[Path, Path]:
    """(the release-shaped Fara-7B checkpoint, its f32 package), built once."""
    if "fara" not in _built:
        entry = lookup("qwen2_5_vl").recognition.variant(VariantRequest({}, Path("Fara-7B")))
        assert entry is not None
        (spec,) = entry.fixtures.released
        _built["fara"] = write_release(spec, tiny_root / "released-fara-7b").folder
        out = tmp_path_factory.mktemp("fara") / "pkg"
        convert(str(_built["fara"]), out)
        _built["package"] = out
    return _built["fara"], _built["package"]


def test_fara_is_recognised_by_its_name_not_its_model_type(tmp_path):
    assert names_fara({}, Path("/models/Fara-7B"))
    assert names_fara({}, Path("/cache/models--microsoft--Fara-7B/snapshots/0123abcd"))
    assert names_fara({"_name_or_path": "microsoft/Fara-7B"}, Path("/tmp/x"))
    assert not names_fara({}, Path("/cache/models--Qwen--Qwen2.5-VL-7B-Instruct/snapshots/0a"))
    assert not names_fara({}, Path("/models/safaris"))


def test_a_fara_release_converts_to_the_fara_pipeline_and_inspect_says_why(fara):
    folder, package = fara
    written = json.loads((folder / "config.json").read_text())
    assert written["model_type"] == "qwen2_5_vl"  # as released: nothing names Fara
    assert written["architectures"] == ["Qwen2_5_VLForConditionalGeneration"]
    checkpoint = Checkpoint.read(folder)
    assert checkpoint.family.key == "fara"
    assert checkpoint.field_review.refused == ()
    model = json.loads((package / "genai_config.json").read_text())["model"]
    assert model["type"] == "fara"
    assert {"image_token_id", "vision_start_token_id", "video_token_id"} <= set(model)
    profile = inspect_source(str(folder))
    assert profile.pipeline_type == "fara" and profile.runnable
    assert any("exactly as 'qwen2_5_vl'" in n for n in profile.notes)


def test_a_fara_release_matches_transformers_over_32_tokens(fara):
    folder, package = fara
    report = verify(package, str(folder), tokens=32)
    assert report.verdict == "PASS", [(c.name, c.verdict, c.reason) for c in report.components]
    assert report.tokens["matched"] == report.tokens["total"] == 32


def test_chat_with_a_fara_package_with_an_image_equals_transformers(fara):
    folder, package = fara
    session = ChatSession(package)  # ONNX Runtime GenAI 0.18 loads it as `fara`
    attachments = session.prepare_attachments([(resources.probe_image(), IMAGE)])
    turn = session.send("Describe this.", attachments, GenerationOptions(max_new_tokens=12))
    assert turn.token_ids
    prompt = session.prompt_text(1)
    arrays = dict(session.runtime.process(prompt, [resources.probe_image()], []).arrays)
    ref = hf_reference.from_runtime(folder, prompt, arrays)
    hf = hf_reference.greedy_generate(hf_reference.load_model(folder), ref, len(turn.token_ids))
    eos = session.info.eos_token_ids
    assert [t for t in turn.token_ids if t not in eos] == [t for t in hf if t not in eos]
