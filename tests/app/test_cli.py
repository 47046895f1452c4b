"""The command line: exit codes, one-line errors, JSON output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mmforge.app.cli import main


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_clear_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("mmforge: error: ")
    return lines[0]


def _folder(tmp_path: Path, config: str | None) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    if config is not None:
        (folder / "config.json").write_text(config)
    return folder


@pytest.mark.parametrize(
    "case,expect",
    [
        ("missing", "No such folder"),
        ("no_config", "has no config.json"),
        ("bad_json", "not valid JSON"),
        ("unknown_type", "Unknown model_type 'wizard_vl'"),
        ("text_only", "text-only model"),
        ("remote_code", "--trust-remote-code"),
        ("not_a_dict", "does not hold a JSON object"),
        ("heads_split", "vision_config.hidden_size 64 is not a multiple of"),
        ("token_id", "image_token_id is 900000, outside its vocabulary of 1,000 tokens"),
        ("kv_heads", "num_attention_heads 8 is not a multiple of text_config.num_key_value"),
    ],
)
def test_bad_inputs_exit_2_with_one_line(tmp_path, capsys, case, expect):
    configs = {
        "no_config": None,
        "bad_json": '{"model_type": "qwen2_5_vl",',
        "unknown_type": '{"model_type": "wizard_vl"}',
        "text_only": '{"model_type": "qwen2"}',
        "remote_code": '{"model_type": "phi3_v", "auto_map": {"AutoConfig": "x.Y"}}',
        "not_a_dict": "[1, 2]",
        "heads_split": '{"model_type": "qwen2_5_vl", "vision_config": {"hidden_size": 64, '
        '"num_heads": 3}}',
        "token_id": '{"model_type": "qwen2_5_vl", "image_token_id": 900000, '
        '"text_config": {"vocab_size": 1000}}',
        "kv_heads": '{"model_type": "qwen2_5_vl", "text_config": {"hidden_size": 64, '
        '"num_attention_heads": 8, "num_key_value_heads": 3}}',
    }
    target = str(tmp_path / "nope") if case == "missing" else str(_folder(tmp_path, configs[case]))
    code, out, err = _run(capsys, "inspect", target)
    assert code == 2
    assert expect in _one_clear_line(err)
    assert out == ""


def test_gated_repo_exits_2(hub, tiny, capsys, tmp_path):
    hub.state.add_folder("org/gated", tiny("qwen2_5_vl"), gated_token="hf_secret")
    # inspect reads config.json, which a gated repo withholds without a token.
    code, _, err = _run(capsys, "inspect", "org/gated")
    assert code == 2
    line = _one_clear_line(err)
    assert "gated" in line and "hf_secret" not in line


def test_unknown_hub_repo_exits_2(hub, capsys):
    code, _, err = _run(capsys, "inspect", "org/does-not-exist")
    assert code == 2
    assert "not found on the hub" in _one_clear_line(err)


def test_usage_mistake_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["inspect"])
    assert e.value.code == 2
    _one_clear_line(capsys.readouterr().err)


def test_inspect_json_prints_one_object(tiny, capsys):
    code, out, _ = _run(capsys, "inspect", str(tiny("gemma3")), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["family_key"] == "gemma3"
    assert data["pipeline_type"] == "gemma3"
    assert data["components"] == ["vision_encoder", "embedding", "decoder"]
    assert data["projector"]["variant"] == "Gemma3MultiModalProjector"
    assert data["converts"] == "converts exactly" and "gemma3" in data["converts_reason"]


def test_inspect_text_output(tiny, capsys):
    code, out, _ = _run(capsys, "inspect", str(tiny("gemma4")))
    assert code == 0
    assert "Gemma 4" in out and "vision_encoder + audio_encoder + embedding + decoder" in out
    assert "Gemma4MultimodalEmbedder" in out
    assert "  converts     exactly\n" in out


def test_verify_writes_json_and_html_and_exits_by_verdict(tiny, package, capsys, tmp_path):
    out_json, out_html = tmp_path / "report.json", tmp_path / "report.html"
    code, out, _ = _run(
        capsys,
        "verify",
        str(package("qwen2_5_vl")),
        "--reference",
        str(tiny("qwen2_5_vl")),
        "--json",
        str(out_json),
        "--html",
        str(out_html),
        "--tokens",
        "8",
    )
    assert code == 0 and "verdict: PASS" in out and "decoder_prefill" in out
    data = json.loads(out_json.read_text())
    assert data["verdict"] == "PASS" and data["first_divergent_stage"] is None
    assert data["tokens"] == {**data["tokens"], "matched": 8, "total": 8}
    for c in data["components"]:
        assert {"name", "max_abs_diff", "cosine", "argmax_match", "verdict"} <= set(c)
    page = out_html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "decoder_prefill" in page
    assert "src=" not in page and "href=" not in page, "the report must be self-contained"

    # The decoder's last norm 5 % too strong: logits a little past the bound, the same
    # answer (AMBIGUOUS, exit 3; measured: 3 % and 10 % are AMBIGUOUS, 30 % FAIL).
    nudged = _scaled_copy(package("qwen2_5_vl"), tmp_path / "nudged", "model.norm.weight", 1.05)
    code, out, _ = _run(
        capsys, "verify", str(nudged), "--reference", str(tiny("qwen2_5_vl")),
        "--json", "-", "--tokens", "4",
    )  # fmt: skip
    assert code == 3 and json.loads(out)["verdict"] == "AMBIGUOUS"
    assert json.loads(out)["first_divergent_stage"] == "decoder_prefill"


def _scaled_copy(package: Path, folder: Path, weight: str, factor: float) -> Path:
    """A copy of `package` whose decoder weight ending in `weight` is `factor` times."""
    import onnx
    from onnx import numpy_helper

    shutil.copytree(package, folder)
    model = onnx.load(str(folder / "decoder.onnx"))
    target = next(t for t in model.graph.initializer if t.name.endswith(weight))
    scaled = numpy_helper.to_array(target) * factor
    target.CopyFrom(numpy_helper.from_array(scaled, target.name))
    (folder / "decoder.onnx.data").unlink()
    onnx.save(
        model,
        str(folder / "decoder.onnx"),
        save_as_external_data=True,
        location="decoder.onnx.data",
    )
    return folder


def test_verify_against_the_wrong_family_exits_2_in_one_line(tiny, package, capsys):
    code, _, err = _run(
        capsys, "verify", str(package("gemma3")), "--reference", str(tiny("qwen2_5_vl"))
    )
    assert code == 2
    assert (
        "converted from Gemma 3, but the model to compare it with is Qwen2.5-VL"
        in _one_clear_line(err)
    )


def test_chat_json_ends_with_the_answer_ids_and_stats(package, capsys):
    from mmforge import resources
    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat import ChatSession, GenerationOptions

    folder = package("qwen2_5_vl")
    code, out, _ = _run(
        capsys,
        "chat",
        str(folder),
        "--image",
        str(resources.probe_image()),
        "--prompt",
        "Describe this.",
        "--max-new-tokens",
        "8",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    session = ChatSession(folder)
    image = session.prepare_attachments([(resources.probe_image(), IMAGE)])
    expected = session.send("Describe this.", image, GenerationOptions(max_new_tokens=8))
    assert data["token_ids"] == expected.token_ids and data["text"] == expected.text
    assert data["stats"]["new_tokens"] == 8 and data["stop_reason"] == "length"
    assert data["attachments"][0]["name"] == "probe.png" and data["load"]["load_s"] > 0


def test_chat_streams_text_then_a_stats_line(package, capsys):
    code, out, err = _run(
        capsys, "chat", str(package("qwen2_5_vl")), "--prompt", "Hi.", "--max-new-tokens", "5"
    )
    assert code == 0 and out.endswith("\n")
    assert "5 tokens at" in err and "token limit" in err


def test_chat_refuses_a_bad_attachment_in_one_line(package, capsys, tmp_path):
    fake = tmp_path / "cat.png"
    fake.write_text("meow")
    code, _, err = _run(
        capsys, "chat", str(package("qwen2_5_vl")), "--image", str(fake), "--prompt", "Look."
    )
    assert code == 2
    assert "cat.png: it is not an image file" in _one_clear_line(err)
    code, _, err = _run(capsys, "chat", str(tmp_path), "--prompt", "Hi.")
    assert code == 2 and "no genai_config.json" in _one_clear_line(err)


def test_chat_refuses_a_video_before_loading_the_model(capsys, tmp_path):
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\x00\x00\x00\x18ftypmp42")
    for flag in ("--image", "--audio"):
        code, _, err = _run(capsys, "chat", str(tmp_path), flag, str(clip), "--prompt", "Hi.")
        line = _one_clear_line(err)
        assert code == 2 and "clip.mp4: ONNX Runtime GenAI 0.18 takes no video" in line


def test_verify_text_only_takes_no_attachments(capsys, tmp_path):
    image = tmp_path / "a.png"
    code, _, err = _run(
        capsys, "verify", str(tmp_path), "--reference", str(tmp_path), "--text-only",
        "--image", str(image),
    )  # fmt: skip
    assert code == 2 and "--text-only takes no --image or --audio" in _one_clear_line(err)


def test_the_installed_script_runs_demo_offline(tmp_path):
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "HF_HUB_OFFLINE": "1",
    }
    script = Path(sys.executable).with_name("mmforge")
    proc = subprocess.run(
        [str(script), "demo", "--json"], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["profile"]["family_key"] == "qwen2_5_vl" and data["profile"]["runnable"]
    assert data["manifest"]["validation"]["image_tokens"] > 0
    assert (Path(data["package"]) / "genai_config.json").is_file()
    assert data["chat"]["stats"]["new_tokens"] > 0 and data["chat"]["token_ids"]
    bad = subprocess.run(
        [str(script), "inspect", str(tmp_path / "missing")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_the_sound_demo_takes_a_clip_offline(tmp_path, capsys, monkeypatch):
    """Issue 31: the offline demo took pictures only, so sound needed a network."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, _ = _run(capsys, "demo", "--sound", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["profile"]["family_key"] == "gemma4"
    assert "audio_encoder" in data["profile"]["components"]
    genai = json.loads((Path(data["package"]) / "genai_config.json").read_text())
    assert genai["model"]["speech"]["filename"]
    assert data["chat"]["stats"]["new_tokens"] > 0
    # The clip reached the model: its prompt is longer than the same question alone.
    assert data["chat"]["stats"]["prompt_tokens"] > 40, data["chat"]["stats"]


def test_json_mode_prints_a_json_error_object_on_failure(tmp_path, capsys):
    code, out, err = _run(capsys, "inspect", str(tmp_path / "nope"), "--json")
    assert code == 2 and "No such folder" in _one_clear_line(err)
    error = json.loads(out)["error"]
    assert error["kind"] == "bad_input" and error["exit_code"] == 2
    assert "No such folder" in error["message"] and error["hint"]


def test_an_internal_error_has_its_own_exit_code_and_json_object(
    tiny, capsys, monkeypatch, tmp_path
):
    from mmforge.backend import inspect as inspect_module

    def broken(*args, **kwargs):
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(inspect_module, "profile_folder", broken)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    code, out, err = _run(capsys, "inspect", str(tiny("qwen2_5_vl")), "--json")
    assert code == 70  # never verify's FAIL (1)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "internal error: RuntimeError: a bug over two lines" in lines[0]
    error = json.loads(out)["error"]
    assert error["kind"] == "internal" and error["exit_code"] == 70


def test_help_lists_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for code in ("0 success", "1 verify FAIL", "2 bad input", "3 verify AMBIGUOUS", "70 internal"):
        assert code in text
    with pytest.raises(SystemExit):
        main(["verify", "--help"])
    assert "70 internal error" in " ".join(capsys.readouterr().out.split())


def test_details_are_shown_with_v_and_pointed_to_without(hub, capsys):
    code, _, err = _run(capsys, "inspect", "org/does-not-exist")
    assert code == 2 and "(run with -v for the details)" in _one_clear_line(err)
    code, _, err = _run(capsys, "-v", "inspect", "org/does-not-exist")
    assert code == 2 and "mmforge: details:" in err and "(run with -v" not in err


@pytest.mark.parametrize(
    "config",
    [
        '{"model_type": "qwen2_5_vl", "vision_config": "oops"}',
        '{"model_type": "mistral3", "text_config": [1, 2]}',
        '{"model_type": "gemma3", "text_config": {"num_attention_heads": 0, "hidden_size": 64}}',
        '{"model_type": "qwen2_5_vl", "text_config": {"rope_parameters": {"rope_type": "yarn"}}}',
    ],
)
def test_a_config_transformers_refuses_is_bad_input_on_one_line(tmp_path, capsys, config):
    code, _, err = _run(capsys, "inspect", str(_folder(tmp_path, config)))
    assert code == 2
    line = _one_clear_line(err)  # a size no model has is refused before transformers reads it
    assert "transformers cannot read" in line or "which no model has" in line


def test_a_missing_relative_folder_is_named_both_as_a_folder_and_a_hub_id(hub, capsys):
    code, _, err = _run(capsys, "inspect", "models/qwen")
    line = _one_clear_line(err)
    assert code == 2 and "no folder models/qwen here" in line and "not found on the hub" in line


def test_a_negative_temperature_is_refused(package, capsys):
    code, _, err = _run(
        capsys, "chat", str(package("qwen2_5_vl")), "--prompt", "hi", "--temperature", "-1"
    )
    assert code == 2 and "--temperature must not be negative" in _one_clear_line(err)


def test_version(capsys):
    from mmforge.backend import __version__

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"mmforge {__version__}"


def test_chat_json_text_is_the_tokenizer_decode_of_its_ids(package, capsys):
    from tokenizers import Tokenizer

    folder = package("qwen2_5_vl")
    code, out, _ = _run(
        capsys, "chat", str(folder), "--prompt", "Hello", "--max-new-tokens", "40", "--json"
    )
    turn = json.loads(out)
    expected = Tokenizer.from_file(str(folder / "tokenizer.json")).decode(
        turn["token_ids"], skip_special_tokens=True
    )
    assert code == 0 and turn["text"] == expected
    # The random model emits bytes that form no character: kept as U+FFFD, not dropped.
    assert "\ufffd" in turn["text"]


def test_progress_lines_show_a_bar_the_rate_and_the_time_left():
    from mmforge.app.terminal import ProgressLine
    from mmforge.backend.jobs import Progress

    now = [100.0]
    line = ProgressLine(width=120, clock=lambda: now[0])
    line.text(Progress("download", 0, 12_800_000, "bytes", "model.safetensors"))
    now[0] += 2.0
    text = line.text(Progress("download", 4_000_000, 12_800_000, "bytes", "model.safetensors"))
    assert "[######..............]  31%" in text
    assert "4.0/12.8 MB" in text and "2.0 MB/s" in text and "0:04 left" in text
    assert line.text(Progress("write", 2, 4, "steps", "decoder")).startswith("write     [")
    assert "2/4" in line.text(Progress("write", 2, 4, "steps", "decoder"))
    now[0] += 65
    assert line.text(Progress("validate", 0, None, "steps", "loading")).endswith("loading  0:00")
    now[0] += 65
    assert line.text(Progress("validate", 0, None, "steps", "loading")).endswith("1:05")


def test_inspect_lists_a_refused_field_and_convert_exits_2_naming_it(tiny, tmp_path, capsys):
    folder = tmp_path / "gemma3"
    shutil.copytree(tiny("gemma3"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["vision_config"]["hidden_act"] = "silu"
    (folder / "config.json").write_text(json.dumps(config))
    code, out, _ = _run(capsys, "inspect", str(folder))
    assert code == 0
    refusal = "refused field: vision_config.hidden_act = 'silu' (supported: 'gelu_pytorch_tanh')"
    assert refusal in out
    assert "  converts     no: config.json sets fields the converted graphs would not" in out
    code, _, err = _run(capsys, "convert", str(folder), "-o", str(tmp_path / "out"))
    assert code == 2
    assert "vision_config.hidden_act = 'silu'" in err and "Traceback" not in err


def test_chat_system_prompt_is_the_sessions(package, capsys):
    from mmforge.backend.chat import ChatSession, GenerationOptions

    folder = package("qwen2_5_vl")
    args = ("chat", str(folder), "--prompt", "Hi.", "--max-new-tokens", "8", "--json")
    code, out, _ = _run(capsys, *args, "--system", "Answer like a pirate.")
    assert code == 0
    session = ChatSession(folder)
    session.set_system("Answer like a pirate.")
    expected = session.send("Hi.", options=GenerationOptions(max_new_tokens=8))
    assert json.loads(out)["token_ids"] == expected.token_ids
    _, without, _ = _run(capsys, *args)
    assert json.loads(without)["token_ids"] != expected.token_ids, "the prompt changed nothing"


def test_a_hub_id_with_a_typo_gets_the_nearest_names(hub, capsys, tmp_path, monkeypatch):
    """The GUI offered near names for a typo; the command line only said "not found"."""
    from tests.backend.test_hubsearch import LISTED

    monkeypatch.chdir(tmp_path)
    hub.state.listed = list(LISTED)
    code, out, err = _run(capsys, "inspect", "Qwen/Qwen2.5-VL-3B-Instrcut")
    line = _one_clear_line(err)
    assert code == 2 and out == ""
    assert "was not found on the hub" in line
    assert "Did you mean Qwen/Qwen2.5-VL-3B-Instruct, " in line  # the closest first
    # With --json the suggestion is in the hint too.
    code, out, _ = _run(capsys, "inspect", "--json", "Qwen/Qwen2.5-VL-3B-Instrcut")
    assert "Did you mean Qwen/Qwen2.5-VL-3B-Instruct" in json.loads(out)["error"]["hint"]


def test_inspect_on_a_package_says_what_other_programs_must_do(package, capsys):
    folder = package("qwen2_5_vl")
    assert main(["inspect", str(folder), "--json"]) == 0
    about = json.loads(capsys.readouterr().out)
    assert about["family"] == "Qwen2.5-VL"
    assert about["pictures"]["sizing"]["rule"] == "smart_resize"
    advice = about["pictures"]["other_programs"]
    assert "EXIF orientation" in advice and "lossless PNG" in advice
    assert "halves rounded to even" in advice and "PIL's bicubic" in advice
    assert main(["inspect", str(folder)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Qwen2.5-VL package (f32) at ") and "pictures: each side" in text


def test_an_approximation_is_refused_with_one_line_until_approximate(tiny, tmp_path, capsys):
    """Issue 30: exit 2 naming what differs and the flag; with --approximate it converts,
    and verify exits 4 (APPROXIMATE), never 0."""
    folder = tmp_path / "splitting"
    shutil.copytree(tiny("idefics3"), folder)  # splitting: tiles no pipeline gives
    pre = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(
        json.dumps({**pre, "do_image_splitting": True})
    )
    out = tmp_path / "pkg"
    code, printed, err = _run(capsys, "convert", str(folder), "-o", str(out), "--json")
    assert code == 2 and not out.exists()
    line = _one_clear_line(err)
    assert "only as an approximation" in line and "--approximate" in line
    assert "--approximate" in json.loads(printed)["error"]["hint"]
    code, _, _ = _run(capsys, "convert", str(folder), "-o", str(out), "--approximate")
    assert code == 0
    code, printed, _ = _run(capsys, "inspect", str(out))  # the package says what it is
    assert code == 0 and "approximation (converted with --approximate): Each picture" in printed
    code, printed, _ = _run(capsys, "inspect", str(out), "--json")
    assert "grid of tiles" in json.loads(printed)["approximation"]
    report = tmp_path / "report.json"
    code, _, _ = _run(
        capsys,
        "verify",
        str(out),
        "--reference",
        str(folder),
        "--tokens",
        "4",
        "--json",
        str(report),
    )
    written = json.loads(report.read_text())
    assert code == 4 and written["verdict"] == "APPROXIMATE"
    assert "tiles" in written["approximation"]
