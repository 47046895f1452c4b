"""The CPU thread settings `Runtime` applies: the overlay's content, not its speed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mmforge.backend.runtime import cpu_session_options, cpu_threads_overlay

# Spinning off; the thread count is ONNX Runtime GenAI's own (not in the overlay).
CHOSEN = {"session.intra_op.allow_spinning": "0"}


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


def _overlay(folder: Path) -> dict[str, Any]:
    text = cpu_threads_overlay(folder)
    assert text is not None
    return dict(json.loads(text)["model"])


def test_decoder_gets_spinning_off(tmp_path: Path) -> None:
    # The sub-models set no options, so they inherit the decoder's: only it is named.
    assert _overlay(_package(tmp_path)) == {"decoder": {"session_options": CHOSEN}}
    assert cpu_session_options(tmp_path) == CHOSEN


def test_package_values_win(tmp_path: Path) -> None:
    own = {"intra_op_num_threads": 3, "session.intra_op.allow_spinning": "1"}
    _package(tmp_path, decoder={"session_options": {"intra_op_num_threads": 3, "log_id": "d"}})
    # The decoder's own options are merged with the overlay's, so only the new key goes.
    assert _overlay(tmp_path) == {"decoder": {"session_options": CHOSEN}}
    assert cpu_session_options(tmp_path) == {**CHOSEN, "intra_op_num_threads": 3}

    _package(tmp_path, decoder={"session_options": own})
    assert cpu_threads_overlay(tmp_path) is None
    assert cpu_session_options(tmp_path) == own


def test_sub_model_options_are_written_back(tmp_path: Path) -> None:
    # ONNX Runtime GenAI 0.18 replaces a sub-model's session_options named in an overlay,
    # so the package's own keys must travel with the added ones.
    vision = {"log_id": "vision", "intra_op_num_threads": 1}
    overlay = _overlay(_package(tmp_path, vision={"session_options": vision}))
    assert overlay["vision"] == {"session_options": {**vision, **CHOSEN}}
    assert "embedding" not in overlay
    assert overlay["decoder"] == {"session_options": CHOSEN}


def test_the_runtime_takes_the_overlay(tmp_path: Path) -> None:
    # Its config parser refuses a misplaced key; session option keys it passes to ONNX
    # Runtime unchecked (that spinning really stops is measured by benchmarks/chat.py).
    import onnxruntime_genai as og

    _package(tmp_path, vision={"session_options": {"log_id": "vision"}})
    og.Config(str(tmp_path)).overlay(cpu_threads_overlay(tmp_path))


def test_not_a_package(tmp_path: Path) -> None:
    assert cpu_threads_overlay(tmp_path) is None
