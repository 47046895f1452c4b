"""The CPU thread settings `Runtime` applies: the overlay's content, not its speed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mmforge.backend.runtime import cpu_plan, cpu_threads_overlay, may_hold_twice
from mmforge.backend.threads import ThreadPlan, default_threads

PLAN = ThreadPlan(3, spinning=False)
CHOSEN = {"intra_op_num_threads": 3, "session.intra_op.allow_spinning": "0"}


def _package(folder: Path, **sections: dict[str, Any]) -> Path:
    model: dict[str, Any] = {
        "type": "qwen2_5_vl",
        "context_length": 64,
        "vocab_size": 16,
        "decoder": {
            "filename": "decoder.onnx",
            "hidden_size": 8,
            "head_size": 8,
            "num_attention_heads": 1,
            "num_key_value_heads": 1,
            "num_hidden_layers": 1,
        },
        "embedding": {"filename": "embedding.onnx"},
        "vision": {"filename": "vision.onnx"},
    }
    for name, section in sections.items():
        model[name].update(section)
    (folder / "genai_config.json").write_text(json.dumps({"model": model}), encoding="utf-8")
    return folder


def _overlay(folder: Path, plan: ThreadPlan = PLAN) -> dict[str, Any]:
    text = cpu_threads_overlay(folder, plan)
    assert text is not None
    return dict(json.loads(text)["model"])


def test_decoder_gets_the_plan(tmp_path: Path) -> None:
    # The sub-models set no options, so they inherit the decoder's: only it is named.
    assert _overlay(_package(tmp_path)) == {"decoder": {"session_options": CHOSEN}}
    spinning = ThreadPlan(2, spinning=True)
    assert _overlay(tmp_path, spinning)["decoder"]["session_options"] == {
        "intra_op_num_threads": 2,
        "session.intra_op.allow_spinning": "1",
    }
    # One thread per physical core; spinning as the cores are.
    assert cpu_plan(tmp_path, free=True) == ThreadPlan(default_threads(), spinning=True)
    assert cpu_plan(tmp_path, free=False) == ThreadPlan(default_threads(), spinning=False)


def test_package_values_win(tmp_path: Path) -> None:
    own = {"intra_op_num_threads": 5, "session.intra_op.allow_spinning": "1"}
    _package(tmp_path, decoder={"session_options": {"intra_op_num_threads": 5, "log_id": "d"}})
    # The decoder's own options are merged with the overlay's, so only the new key goes.
    assert _overlay(tmp_path) == {
        "decoder": {"session_options": {"session.intra_op.allow_spinning": "0"}}
    }
    assert cpu_plan(tmp_path, free=True) == ThreadPlan(5, spinning=True)
    assert may_hold_twice(tmp_path)

    _package(tmp_path, decoder={"session_options": own})
    assert cpu_threads_overlay(tmp_path, PLAN) is None
    assert cpu_plan(tmp_path, free=False) == ThreadPlan(5, spinning=True)
    # Its spinning is its own: no second load with the other setting.
    assert not may_hold_twice(tmp_path)


def test_only_a_small_package_is_held_twice(tmp_path: Path, monkeypatch: Any) -> None:
    from mmforge.backend import memory, runtime

    _package(tmp_path)
    (tmp_path / "decoder.onnx").write_bytes(b"x" * 1000)
    (tmp_path / "decoder.onnx.data").write_bytes(b"x" * 3000)
    monkeypatch.setattr(memory, "available_bytes", lambda: 16_000)
    assert may_hold_twice(tmp_path)
    monkeypatch.setattr(memory, "available_bytes", lambda: 15_999)  # four copies no longer fit
    assert not may_hold_twice(tmp_path)
    monkeypatch.setattr(memory, "available_bytes", lambda: None)
    assert not may_hold_twice(tmp_path)
    monkeypatch.setattr(memory, "available_bytes", lambda: 1 << 40)
    monkeypatch.setattr(runtime, "TWIN_MAX_BYTES", 3999)
    assert not may_hold_twice(tmp_path)


def test_sub_model_options_are_written_back(tmp_path: Path) -> None:
    # ONNX Runtime GenAI 0.18 replaces a sub-model's session_options named in an overlay,
    # so the package's own keys must travel with the added ones.
    vision = {"log_id": "vision", "intra_op_num_threads": 1}
    overlay = _overlay(_package(tmp_path, vision={"session_options": vision}))
    # Its own thread count stays; the spinning setting is added.
    assert overlay["vision"] == {"session_options": {**CHOSEN, **vision}}
    assert "embedding" not in overlay
    assert overlay["decoder"] == {"session_options": CHOSEN}


def test_the_runtime_takes_the_overlay(tmp_path: Path) -> None:
    # Its config parser refuses a misplaced key; session option keys it passes to ONNX
    # Runtime unchecked (that spinning really stops is measured by benchmarks/chat.py).
    import onnxruntime_genai as og

    _package(tmp_path, vision={"session_options": {"log_id": "vision"}})
    og.Config(str(tmp_path)).overlay(cpu_threads_overlay(tmp_path, PLAN))


def test_not_a_package(tmp_path: Path) -> None:
    assert cpu_threads_overlay(tmp_path, PLAN) is None
