"""Hostile content, fourth round: packages and files (issue 47).

A package folder may come from anyone: a field of the wrong JSON type, a processor that
scales every picture to 40 million pixels or a tokenizer of no known model is one clear
refusal naming the file and the field, never "the chat worker stopped" or exit 70. The
files mmforge writes for itself (the CLI's log) are private, and the runtime's telemetry
file cannot be pointed at another file by a link planted in the shared temp folder.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from tests.app.test_hostile import _cli, _copy, _one_line, _run


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _package_copy(package, tmp_path: Path) -> Path:
    return Path(shutil.copytree(package("qwen2_5_vl"), tmp_path / "pkg"))


def _set(dotted: str, value):
    """An edit of genai_config.json setting `dotted` (under "model" unless it says search)."""

    def edit(config: dict) -> None:
        *parents, last = dotted.split(".")
        node = config if parents and parents[0] == "search" else config["model"]
        for key in parents:
            node = node[key]
        node[last] = value

    return edit


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("context_length", "abc", "model.context_length is 'abc', not a whole number"),
        ("context_length", 10**12, "model.context_length is 1000000000000, outside 1 to "),
        ("context_length", 0, "model.context_length is 0, outside 1 to "),
        ("eos_token_id", {"a": 1}, "model.eos_token_id is {'a': 1}, not a token id"),
        ("eos_token_id", [386, "x"], "model.eos_token_id is [386, 'x'], not a token id"),
        ("pad_token_id", True, "model.pad_token_id is True, not a token id"),
        ("vocab_size", "391", "model.vocab_size is '391', not a whole number"),
        ("decoder.inputs", [], "model.decoder.inputs is [], not an object"),
        ("decoder.num_hidden_layers", 2.5, "model.decoder.num_hidden_layers is 2.5, not a"),
        ("vision", "vision.onnx", "model.vision is 'vision.onnx', not an object"),
        ("vision.filename", "../vision.onnx", "model.vision.filename is '../vision.onnx'"),
        ("search.max_length", "long", "search.max_length is 'long', not a whole number"),
        ("search.do_sample", "no", "search.do_sample is 'no', not true or false"),
    ],
)
def test_a_genai_config_field_of_the_wrong_type_is_one_clear_refusal(
    package, tmp_path, capsys, field, value, says
):
    pkg = _package_copy(package, tmp_path)
    _edit_json(pkg / "genai_config.json", _set(field, value))
    code, _, err = _run(capsys, "chat", str(pkg), "--prompt", "hi", "--max-new-tokens", "2")
    assert code == 2, err
    line = _one_line(err)
    assert f"{pkg / 'genai_config.json'}: {says}" in line
    assert "worker stopped" not in line and "could not load" not in line


@pytest.mark.parametrize("command", ["serve", "verify", "chat"])
def test_a_context_length_of_the_wrong_type_is_refused_by_serve_verify_and_chat(
    package, tiny, tmp_path, command
):
    pkg = _package_copy(package, tmp_path)
    _edit_json(pkg / "genai_config.json", _set("context_length", "4096"))
    argv = {
        "serve": ["serve", str(pkg), "--port", "0"],
        "verify": ["verify", str(pkg), "--reference", str(tiny("qwen2_5_vl"))],
        "chat": ["chat", str(pkg), "--prompt", "hi", "--max-new-tokens", "2"],
    }[command]
    code, err, _ = _cli(*argv)
    assert code == 2, err[-2000:]
    line = _one_line(err)
    assert "genai_config.json: model.context_length is '4096', not a whole number" in line


def _resize(edit):
    """An edit of processor_config.json's Resize step's attributes."""

    def change(processor: dict) -> None:
        steps = processor["processor"]["transforms"]
        resize = next(s for s in steps if s["operation"]["type"] == "Resize")
        edit(resize["operation"]["attrs"])

    return change


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (
            lambda a: a.update(min_pixels=40_000_000, max_pixels=40_000_000),
            "processor.transforms[2].operation.attrs.min_pixels is 40,000,000",
        ),
        (
            lambda a: a.update(max_pixels=200_000_000),
            "processor.transforms[2].operation.attrs.max_pixels is 200,000,000",
        ),
        (
            lambda a: a.update(min_pixels="3136"),
            "processor.transforms[2].operation.attrs.min_pixels is '3136', not a whole number",
        ),
        (
            lambda a: a.update(min_pixels=60_000, max_pixels=50_176),
            "min_pixels 60,000 is above max_pixels 50,176",
        ),
        (
            lambda a: (
                a.clear(),
                a.update(interpolation="CUBIC", width=100_000, height=100_000),
            ),
            "Resize to 100,000×100,000 is 10,000,000,000 pixels",
        ),
    ],
)
def test_a_processor_that_asks_for_too_many_pixels_is_refused_before_the_runtime_sees_it(
    package, tmp_path, capsys, edit, says
):
    pkg = _package_copy(package, tmp_path)
    _edit_json(pkg / "processor_config.json", _resize(edit))
    code, _, err = _run(capsys, "chat", str(pkg), "--prompt", "hi", "--max-new-tokens", "2")
    assert code == 2, err
    line = _one_line(err)
    assert f"{pkg / 'processor_config.json'}: " in line and says in line


def test_serve_refuses_a_processor_that_upscales_every_picture(package, tmp_path):
    pkg = _package_copy(package, tmp_path)
    _edit_json(
        pkg / "processor_config.json",
        _resize(lambda a: a.update(min_pixels=40_000_000, max_pixels=40_000_000)),
    )
    code, err, took = _cli("serve", str(pkg), "--port", "0")
    assert code == 2, err[-2000:]
    line = _one_line(err)
    assert "min_pixels is 40,000,000, above the 4,194,304 pixels" in line
    assert took < 30


def test_a_checkpoint_whose_processor_would_be_refused_is_not_converted(tiny, tmp_path, capsys):
    folder = _copy(tiny, tmp_path)
    _edit_json(folder / "preprocessor_config.json", lambda p: p.update(max_pixels=200_000_000))
    out = tmp_path / "out"
    code, _, err = _run(capsys, "convert", str(folder), "-o", str(out))
    assert code == 2, err
    line = _one_line(err)
    assert f"The settings of {folder} make a package mmforge would not run: " in line
    assert "processor_config.json: processor.transforms[2].operation.attrs.max_pixels is " in line
    assert "200,000,000" in line
    assert not out.exists() and not list(tmp_path.glob(".out.mmforge-*"))


def test_the_pixel_bounds_hold_what_every_family_writes_for_released_checkpoints():
    from mmforge.backend.package_files import check_processor

    # Qwen3-VL's size.longest_edge (2^24), the largest maximum a released checkpoint has;
    # and 65,536, the largest minimum (Qwen3-VL's shortest_edge, LFM2-VL's 64 tokens).
    qwen3 = {"smart_resize": 1, "min_pixels": 65_536, "max_pixels": 16_777_216}
    gemma = {"width": 896, "height": 896, "keep_aspect_ratio": 0}
    for attrs in (qwen3, gemma):
        steps = [{"operation": {"name": "resize", "type": "Resize", "attrs": attrs}}]
        check_processor({"processor": {"transforms": steps}}, Path("p/processor_config.json"))


@pytest.mark.parametrize(
    ("op", "attrs", "says"),
    [
        (
            "Gemma4ImageTransform",
            {"patch_size": 16, "max_soft_tokens": 10**6, "pooling_kernel_size": 3},
            "2,304,000,000 pixels",
        ),
        ("Phi3ImageTransform", {"num_crops": 10**5, "num_img_tokens": 144}, "num_crops"),
        (
            "Phi4VisionDynamicPreprocess",
            {"dynamic_hd": 36, "dyhd_base_resolution": 10**4},
            "3,600,000,000 pixels",
        ),
    ],
)
def test_other_processors_pixel_budgets_are_bounded_too(op, attrs, says):
    from mmforge.backend.errors import MmforgeError
    from mmforge.backend.package_files import check_processor

    steps = [{"operation": {"name": "x", "type": op, "attrs": attrs}}]
    with pytest.raises(MmforgeError) as e:
        check_processor({"processor": {"transforms": steps}}, Path("p/processor_config.json"))
    assert "processor_config.json: " in e.value.user_message and says in e.value.user_message


def test_a_tokenizer_of_no_known_model_type_is_refused_before_conversion(
    tiny, package, tmp_path, capsys
):
    folder = _copy(tiny, tmp_path)
    _edit_json(folder / "tokenizer.json", lambda t: t["model"].update(type="Evil"))
    out = tmp_path / "out"
    code, _, err = _run(capsys, "convert", str(folder), "-o", str(out))
    assert code == 2, err
    line = _one_line(err)
    assert f"tokenizer.json of {folder}: model.type is 'Evil'" in line
    assert "BPE, Unigram, WordLevel or WordPiece" in line
    assert not out.exists() and not list(tmp_path.glob(".out.mmforge-*"))
    # A package that already holds one is refused by chat the same way, not "worker stopped".
    pkg = _package_copy(package, tmp_path)
    _edit_json(pkg / "tokenizer.json", lambda t: t["model"].update(type="Evil"))
    code, _, err = _run(capsys, "chat", str(pkg), "--prompt", "hi", "--max-new-tokens", "2")
    assert code == 2, err
    assert f"tokenizer.json of {pkg}: model.type is 'Evil'" in _one_line(err)


def test_a_planted_ses_link_in_tmpdir_is_not_followed_by_chat(package, tmp_path):
    import subprocess

    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    (shared / ".ses").symlink_to(target)  # planted by another user of the shared /tmp
    done = subprocess.run(
        [sys.executable, "-m", "mmforge.app", "chat", str(package("qwen2_5_vl")), "--prompt",
         "hi", "--max-new-tokens", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(shared)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert target.read_text() == "keep me\n"
    assert sorted(p.name for p in shared.iterdir()) == [".ses"]  # the worker's folder is gone


def test_a_planted_ses_link_in_tmpdir_is_not_followed_by_verify(package, tiny, tmp_path):
    """verify (and convert's check) load the runtime in the CLI's own process."""
    import subprocess

    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    (shared / ".ses").symlink_to(target)
    done = subprocess.run(
        [sys.executable, "-m", "mmforge.app", "verify", str(package("qwen2_5_vl")),
         "--reference", str(tiny("qwen2_5_vl")), "--tokens", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(shared), "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert target.read_text() == "keep me\n"
    assert sorted(p.name for p in shared.iterdir()) == [".ses"]  # the CLI's folder is gone


def test_a_worker_runs_with_a_private_tmpdir_removed_when_it_ends(tmp_path, monkeypatch):
    from mmforge.backend.worker import client

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where this process's go
    script = "import os, sys; print(os.environ['TMPDIR'], flush=True); sys.stdin.read()"
    monkeypatch.setattr(client, "worker_command", lambda: [sys.executable, "-c", script])
    job = client.WorkerJob("inspect", {})
    line = job._read_line()
    assert line is not None
    private = Path(line)
    assert private.parent == tmp_path and private.is_dir()
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    job.close()
    assert not private.exists()


def test_a_killed_worker_leaves_no_private_tmpdir(tmp_path, monkeypatch):
    from mmforge.backend.worker import client

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    script = "import os, time; print(os.environ['TMPDIR'], flush=True); time.sleep(60)"
    monkeypatch.setattr(client, "worker_command", lambda: [sys.executable, "-c", script])
    job = client.WorkerJob("inspect", {})
    private = Path(job._read_line() or "")
    assert private.is_dir()
    job.kill()
    job.close()
    assert not private.exists()


def test_the_cli_log_of_an_internal_error_is_private(tiny, capsys, monkeypatch, tmp_path):
    from mmforge.backend import inspect as inspect_module

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(inspect_module, "profile_folder", broken)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    old = os.umask(0o022)  # the usual umask: a file made without care is 0644
    try:
        code, _, err = _run(capsys, "inspect", str(tiny("qwen2_5_vl")))
        assert code == 70, err
        log = next((tmp_path / "state").rglob("mmforge.log"))
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
        assert "RuntimeError: a bug" in log.read_text()
        log.chmod(0o644)  # a log written by an older version is made private too
        assert _run(capsys, "inspect", str(tiny("qwen2_5_vl")))[0] == 70
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_chat_takes_a_top_k_above_the_vocabulary_as_all_of_it(package, capsys):
    """The runtime refuses a top_k above the vocabulary; chat keeps every token instead."""
    pkg = package("qwen2_5_vl")
    vocab = json.loads((pkg / "genai_config.json").read_text())["model"]["vocab_size"]
    answers = []
    for top_k in (vocab, vocab + 1000):
        code, out, err = _run(
            capsys, "chat", str(pkg), "--prompt", "hi", "--max-new-tokens", "6",
            "--temperature", "1.5", "--seed", "7", "--top-k", str(top_k), "--json",
        )  # fmt: skip
        assert code == 0, err
        answers.append(json.loads(out)["token_ids"])
    assert answers[0] == answers[1]
