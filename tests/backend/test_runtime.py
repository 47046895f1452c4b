"""The CPU thread settings `Runtime` applies: the overlay's content and that one model
serves every turn, not their speed (benchmarks/chat.py --load and --turns)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mmforge.backend.runtime import cpu_plan, cpu_threads_overlay
from mmforge.backend.threads import SPIN_US, ThreadPlan, default_threads

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
    # The policy: one thread per physical core, spinning for SPIN_US before sleeping if
    # the cores were free at load.
    plan = cpu_plan(tmp_path, free=True)
    assert plan == ThreadPlan(default_threads(), spinning=True, spin_us=SPIN_US)
    assert cpu_plan(tmp_path, free=False) == ThreadPlan(default_threads(), spinning=False)
    assert _overlay(tmp_path, plan)["decoder"]["session_options"] == {
        "intra_op_num_threads": default_threads(),
        "session.intra_op.allow_spinning": "1",
        "session.intra_op.spin_duration_us": str(SPIN_US),
    }


def test_package_values_win(tmp_path: Path) -> None:
    own = {"intra_op_num_threads": 5, "session.intra_op.allow_spinning": "1"}
    _package(tmp_path, decoder={"session_options": {"intra_op_num_threads": 5, "log_id": "d"}})
    # The decoder's own options are merged with the overlay's, so only the new key goes.
    assert _overlay(tmp_path) == {
        "decoder": {"session_options": {"session.intra_op.allow_spinning": "0"}}
    }
    assert cpu_plan(tmp_path, free=True) == ThreadPlan(5, spinning=True)

    _package(tmp_path, decoder={"session_options": {**own, "session.intra_op.allow_spinning": "0"}})
    assert cpu_threads_overlay(tmp_path, PLAN) is None
    # Its own spinning wins, whatever the cores.
    assert cpu_plan(tmp_path, free=True) == ThreadPlan(5, spinning=False)
    assert cpu_threads_overlay(tmp_path, cpu_plan(tmp_path, free=True)) is None


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


def test_one_model_serves_every_turn_on_one_plan(package: Any, monkeypatch: Any) -> None:
    # The package is loaded once, with the plan chosen then from one look at the cores:
    # a continued turn and a new conversation run on that model, and the plan stays.
    import onnxruntime_genai as og

    from mmforge import resources
    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat import ChatSession, GenerationOptions
    from mmforge.backend.threads import CpuWatch

    folder = package("qwen2_5_vl")  # converted (and validated) first
    looks: list[bool] = []
    monkeypatch.setattr(CpuWatch, "cores_free", lambda self, wait=False: looks.append(wait) or True)
    loads: list[Any] = []
    real = og.Model

    def counted(*args: Any) -> Any:
        loads.append(real(*args))
        return loads[-1]

    monkeypatch.setattr(og, "Model", counted)
    session = ChatSession(folder)
    runtime = session.runtime
    model, plan = runtime.model, runtime.plan
    assert loads == [model] and plan == cpu_plan(runtime.folder, free=True)
    picture = [(resources.probe_image(), IMAGE)]
    greedy = GenerationOptions(max_new_tokens=4)
    first = session.send("Describe this.", session.prepare_attachments(picture), greedy)
    later = session.send("And then?", options=greedy)
    assert later.stats.prefill == "continued"
    session.new_conversation()
    again = session.send("Describe this.", session.prepare_attachments(picture), greedy)
    assert again.token_ids == first.token_ids
    assert loads == [model] and runtime.model is model and runtime.plan == plan
    assert looks == [True]  # one look, at load (its window waited out)
