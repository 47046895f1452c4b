"""Hostile checkpoints, packages and disks through the command line: exit 2, one line."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mmforge.app.cli import main


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("mmforge: error: ")
    return lines[0]


def _copy(tiny, tmp_path: Path, family: str = "qwen2_5_vl") -> Path:
    folder = tmp_path / "model"
    shutil.copytree(tiny(family), folder)
    return folder


@pytest.mark.parametrize("kind", ["file_link_out", "folder_link_out", "fifo", "dangling"])
def test_a_local_file_that_leaves_the_folder_or_is_not_a_file_is_refused(
    tiny, tmp_path, capsys, kind
):
    folder = _copy(tiny, tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("#version: private key\n")
    if kind == "file_link_out":
        (folder / "merges.txt").symlink_to("../secret")
        name = "merges.txt"
    elif kind == "folder_link_out":
        (folder / "vision-lora").symlink_to(tmp_path)
        name = "vision-lora"
    elif kind == "fifo":
        os.mkfifo(folder / "vocab.json")
        name = "vocab.json"
    else:
        (folder / "added_tokens.json").symlink_to(tmp_path / "gone")
        name = "added_tokens.json"
    out = tmp_path / "pkg"
    code, _, err = _run(capsys, "convert", str(folder), "-o", str(out))
    assert code == 2
    assert name in _one_line(err)
    assert not out.exists()


def test_links_that_stay_in_the_folder_or_in_a_hub_cache_snapshot_are_fine(tiny, tmp_path):
    from mmforge.backend.source import resolve

    folder = _copy(tiny, tmp_path)
    (folder / "sub").mkdir()
    (folder / "tokenizer.json").rename(folder / "sub" / "tokenizer.json")
    (folder / "tokenizer.json").symlink_to("sub/tokenizer.json")
    assert "tokenizer.json" in resolve(str(folder)).files
    # A snapshot of the Hugging Face cache: every file links to ../../blobs/<hash>.
    snapshot = tmp_path / "models--o--m" / "snapshots" / ("0" * 40)
    blobs = tmp_path / "models--o--m" / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for path in sorted(tiny("qwen2_5_vl").iterdir()):
        shutil.copyfile(path, blobs / path.name)
        (snapshot / path.name).symlink_to(Path("../../blobs") / path.name)
    assert "config.json" in resolve(str(snapshot)).files


@pytest.fixture
def small_disk(tmp_path):
    """A 600 KB tmpfs at tmp_path/disk (root only: skipped where it cannot be mounted)."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=600k,mode=0755", "tmpfs", str(disk)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_a_disk_that_fills_during_the_conversion_is_bad_input_and_leaves_nothing(
    tiny, small_disk, capsys, monkeypatch
):
    from mmforge.backend.convert import job

    # The estimate fits (as when something else fills the disk meanwhile).
    monkeypatch.setattr(job, "_check_disk_space", lambda out, size: None)
    out = small_disk / "pkg"
    code, _, err = _run(capsys, "convert", str(tiny("qwen2_5_vl")), "-o", str(out))
    assert code == 2, err
    assert "space" in _one_line(err)
    assert list(small_disk.iterdir()) == []


def test_chat_save_on_a_full_disk_is_bad_input_and_leaves_nothing(
    package, small_disk, capsys, monkeypatch
):
    from mmforge import resources

    monkeypatch.setenv("XDG_DATA_HOME", str(small_disk / "data"))
    (small_disk / "data").mkdir()
    (small_disk / "filler").write_bytes(b"\0" * (600 * 1024 - 2 * 4096))  # all but 8 KB
    image = resources.probe_image()
    code, _, err = _run(
        capsys,
        "chat",
        str(package("qwen2_5_vl")),
        "--save",
        "--image",
        str(image),
        "--prompt",
        "hi " * 2000,
        "--max-new-tokens",
        "2",
    )
    assert code == 2, err
    line = _one_line(err)
    assert "space" in line and "Internal error" not in line
    left = sorted(p.relative_to(small_disk).as_posix() for p in small_disk.rglob("*"))
    assert left == ["data", "filler"], (err, left)


def _absurd(folder: Path, case: str) -> None:
    import json

    path = folder / "config.json"
    config = json.loads(path.read_text())
    text = config["text_config"]
    if case == "layers":
        text["num_hidden_layers"] = 10**9
        text.pop("layer_types", None)
        text.pop("max_window_layers", None)
    elif case == "hidden":
        text["hidden_size"] = 2**31
    elif case == "negative":
        config["vision_config"]["depth"] = -3
    else:
        nested: object = 1
        for _ in range(100_000):
            nested = [nested]
        config["extra"] = nested
    path.write_text(json.dumps(config) if case != "nested" else _deep_json(config))


def _deep_json(config: dict) -> str:
    import json

    config.pop("extra")
    text = json.dumps(config)
    return text[:-1] + ', "extra": ' + "[" * 100_000 + "]" * 100_000 + "}"


@pytest.mark.parametrize("case", ["layers", "hidden", "negative", "nested"])
def test_an_absurd_config_is_bad_input_at_once(tiny, tmp_path, case):
    import resource
    import subprocess
    import sys
    import time

    folder = _copy(tiny, tmp_path)
    _absurd(folder, case)

    def limit() -> None:  # an unbounded inspect fails here instead of filling the machine
        resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))

    start = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mmforge.app", "inspect", str(folder)],
            capture_output=True,
            text=True,
            timeout=30,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"inspect of a config with absurd {case} ran over 30 s")
    assert done.returncode == 2, done.stderr[-2000:]
    line = _one_line(done.stderr)
    assert "config.json" in line
    assert time.monotonic() - start < 30


HOSTILE_TEMPLATES = {
    "loop": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "doubling": "{% set ns = namespace(s='ab') %}{% for i in range(60) %}"
    "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
    "output": "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}",
}


def _with_template(folder: Path, template: str) -> None:
    import json

    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["chat_template"] = template
    path.write_text(json.dumps(config))


def _cli(*argv: str, timeout: float = 60) -> tuple[int, str, float]:
    """The real CLI in a child process, bounded, so a hang fails the test instead."""
    import resource
    import subprocess
    import sys
    import time

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, 8 * 2**30))

    start = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mmforge.app", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"mmforge {argv[0]} ran over {timeout} s")
    return done.returncode, done.stderr, time.monotonic() - start


@pytest.mark.parametrize("kind", sorted(HOSTILE_TEMPLATES))
def test_a_chat_template_over_the_limits_is_refused_by_convert(tiny, tmp_path, kind):
    folder = _copy(tiny, tmp_path)
    _with_template(folder, HOSTILE_TEMPLATES[kind])
    out = tmp_path / "pkg"
    code, err, _ = _cli("convert", str(folder), "-o", str(out))
    assert code == 2, err[-2000:]
    assert "chat template" in _one_line(err)
    assert not out.exists() and not list(tmp_path.glob(".pkg.mmforge-*"))


def test_chat_refuses_a_package_whose_template_never_ends(package, tmp_path):
    pkg = Path(shutil.copytree(package("qwen2_5_vl"), tmp_path / "pkg"))
    _with_template(pkg, HOSTILE_TEMPLATES["loop"])
    code, err, took = _cli("chat", str(pkg), "--prompt", "hi", "--max-new-tokens", "2")
    assert code == 2, err[-2000:]
    assert "chat template" in _one_line(err)
    assert took < 30
