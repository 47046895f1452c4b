"""Hostile content, third round, through the command line (issue 29).

A checkpoint, a hub or a package cannot write to the terminal, outlive SIGTERM, or have
its own mistake called mmforge's: every case is exit 2 with one line naming the file.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.app.test_hostile import _copy, _one_line, _run

HOSTILE_TEXT = "\x1b]0;PWNED\x07\x1b[31m\u202e"


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _raw(path: Path, text: str) -> None:
    path.write_text(text)


def test_a_model_type_with_terminal_escapes_is_shown_escaped(tiny, tmp_path, capsys):
    folder = _copy(tiny, tmp_path)
    _edit_json(folder / "config.json", lambda c: c.update(model_type=HOSTILE_TEXT))
    code, out, err = _run(capsys, "inspect", str(folder))
    assert code == 2
    line = _one_line(err)
    assert "\\x1b]0;PWNED\\x07\\x1b[31m\\u202e" in line
    assert not any(c in out + err for c in "\x1b\x07\u202e")


def test_a_streamed_answer_reaches_the_terminal_escaped_and_json_keeps_it_exact():
    from mmforge.app.cli import _stream_turn

    events = [
        {"event": "token", "text": "ok "},
        {"event": "token", "text": "\x1b]0;PWNED\x07\x1b[31m"},  # split escapes stay shown
        {"event": "token", "text": "\x1b]52;c;ZXZpbA==\x07\nnext\tline\r\x9b2J"},
        {"event": "turn", "value": {"text": "exact"}},
    ]
    live = io.StringIO()
    turn, _ = _stream_turn(iter(events), SimpleNamespace(json=False), live)
    assert live.getvalue() == (
        "ok \\x1b]0;PWNED\\x07\\x1b[31m\\x1b]52;c;ZXZpbA==\\x07\nnext\tline\\x0d\\x9b2J"
    )
    assert turn == {"text": "exact"}


def test_log_lines_escape_what_they_quote(tmp_path):
    import subprocess
    import sys

    script = (
        "import logging, sys\n"
        "from mmforge.app.cli import main\n"
        "main(['inspect', sys.argv[1]])\n"
        "logging.getLogger('mmforge.x').warning('quoted: %s', sys.argv[2])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "missing"), HOSTILE_TEXT],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "WARNING mmforge.x: quoted: \\x1b]0;PWNED\\x07\\x1b[31m\\u202e" in done.stderr
    assert not any(c in done.stderr for c in "\x1b\x07\u202e")


def test_sigterm_stops_chat_generation_at_once_like_ctrl_c(package, capsys, monkeypatch):
    from mmforge.backend.chat.client import ChatClient

    real_send = ChatClient.send

    def send_then_terminated(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # as `timeout` or a service manager sends it
        return real_send(self, *args, **kwargs)

    monkeypatch.setattr(ChatClient, "send", send_then_terminated)
    pkg = str(package("qwen2_5_vl"))
    code, out, _ = _run(capsys, "chat", pkg, "--prompt", "hi", "--max-new-tokens", "4000", "--json")
    assert code == 130
    answer = json.loads(out)
    # Stopped by the signal: unstopped, it ends on EOS after ~800 tokens ("eos"). How many
    # tokens came first depends on the machine's load (the tiny model makes thousands a
    # second; 540 were seen on a loaded 2-core machine), so no count is asserted.
    assert answer["stop_reason"] == "stopped"
    assert answer["stats"]["new_tokens"] < 4000


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("Evil", "model.type 'Evil'"),
        (["qwen2_5_vl"], "model.type '['qwen2_5_vl']'"),
        ("qwen2_5_vl_text", "model.type 'qwen2_5_vl_text'"),
    ],
)
def test_a_package_of_an_unknown_runtime_type_is_not_runnable(
    package, tmp_path, capsys, kind, says
):
    pkg = Path(shutil.copytree(package("qwen2_5_vl"), tmp_path / "pkg"))
    _edit_json(pkg / "genai_config.json", lambda c: c["model"].update(type=kind))
    code, _, err = _run(capsys, "chat", str(pkg), "--prompt", "hi")
    assert code == 2
    line = _one_line(err)
    assert "is not a runnable package" in line and says in line


def test_a_config_that_is_a_fifo_is_refused_at_once(tiny, tmp_path, capsys):
    folder = _copy(tiny, tmp_path)
    (folder / "generation_config.json").unlink()
    os.mkfifo(folder / "generation_config.json")
    code, _, err = _run(capsys, "inspect", str(folder))
    assert code == 2 and "generation_config.json" in _one_line(err)


@pytest.mark.parametrize(
    ("file", "write", "says"),
    [
        ("config.json", lambda t: t[:-1] + ', "x": ' + "9" * 5000 + "}", "config.json: x is"),
        (
            "generation_config.json",
            lambda t: t[:-1] + ', "max_length": ' + "1" * 5000 + "}",
            "generation_config.json: max_length is",
        ),
        (
            "preprocessor_config.json",
            lambda t: t[:-1] + ', "temporal_patch_size": ' + "2" * 5000 + "}",
            "preprocessor_config.json: temporal_patch_size is",
        ),
        (
            "preprocessor_config.json",
            lambda t: t.replace('"image_std": [', '"image_std": [Infinity, '),
            "image_std[0] is Infinity",
        ),
        (
            "preprocessor_config.json",
            lambda t: t[:-1] + ', "size": {"shortest_edge": 3136, "longest_edge": 1e400}}',
            "size.longest_edge is 1e400, not a finite number",
        ),
        ("config.json", lambda t: t.replace('"model_type": "qwen2_5_vl"', '"model_type": 7'), ""),
    ],
)
def test_hostile_numbers_in_metadata_files_name_the_file_and_field(
    tiny, tmp_path, capsys, file, write, says
):
    folder = _copy(tiny, tmp_path)
    path = folder / file
    text = json.dumps(json.loads(path.read_text()))
    changed = write(text)
    assert changed != text
    _raw(path, changed)
    code, _, err = _run(capsys, "inspect", str(folder))
    assert code == 2, err
    line = _one_line(err)
    assert file in line and says in line and "conversion bug" not in line


@pytest.mark.parametrize("value", [["qwen2_5_vl"], {"a": 1}, 7, True])
def test_a_model_type_that_is_not_text_is_bad_input(tiny, tmp_path, capsys, value):
    folder = _copy(tiny, tmp_path)
    _edit_json(folder / "config.json", lambda c: c.update(model_type=value))
    code, _, err = _run(capsys, "inspect", str(folder))
    assert code == 2
    assert "model_type is" in _one_line(err) and "not a name" in _one_line(err)


def test_min_pixels_above_max_pixels_through_size_edges_is_refused(tiny, tmp_path, capsys):
    folder = _copy(tiny, tmp_path)

    def invert(settings: dict) -> None:
        settings.pop("min_pixels", None)
        settings.pop("max_pixels", None)
        settings["size"] = {"shortest_edge": 200_704, "longest_edge": 3136}

    _edit_json(folder / "preprocessor_config.json", invert)
    out = tmp_path / "pkg"
    code, _, err = _run(capsys, "convert", str(folder), "-o", str(out))
    assert code == 2
    line = _one_line(err)
    assert "preprocessor_config.json" in line and "size.shortest_edge 200,704" in line
    assert not out.exists()


@pytest.mark.parametrize("case", ["read_only_parent", "long_name", "inside_source"])
def test_an_out_path_that_cannot_be_written_is_refused_before_any_work(
    tiny, tmp_path, capsys, monkeypatch, case
):
    import subprocess

    from mmforge.backend.convert import job

    folder = _copy(tiny, tmp_path)
    if case == "read_only_parent":
        parent = tmp_path / "locked"
        parent.mkdir()
        if os.geteuid() == 0:  # root writes through 0555: a read-only mount stops it
            mounted = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(parent)],
                capture_output=True,
            )
            if mounted.returncode != 0:
                pytest.skip("cannot mount a read-only tmpfs here")
        else:
            parent.chmod(0o555)
        out = parent / "pkg"
    elif case == "long_name":
        out = tmp_path / ("p" * 240)
    else:
        out = folder / "pkg"
    inspected = []
    monkeypatch.setattr(job, "profile_checkpoint", lambda *a, **k: inspected.append(a))
    try:
        code, _, err = _run(capsys, "convert", str(folder), "-o", str(out))
    finally:
        if case == "read_only_parent" and os.geteuid() == 0:
            subprocess.run(["umount", str(tmp_path / "locked")], check=False)
    assert code == 2, err
    line = _one_line(err)
    expected = {
        "read_only_parent": "not writable",
        "long_name": "name is too long (240 bytes",
        "inside_source": "inside the model folder",
    }[case]
    assert expected in line
    assert inspected == []  # refused before the inspect work
    assert not out.exists()


@pytest.mark.parametrize("case", ["infinity_offsets", "deep_header"])
def test_a_hostile_safetensors_header_is_bad_input_naming_the_file(tiny, tmp_path, capsys, case):
    import struct

    folder = _copy(tiny, tmp_path)
    path = folder / "model.safetensors"
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    if case == "infinity_offsets":
        name = next(k for k in header if k != "__metadata__")
        text = json.dumps(header).replace(
            json.dumps(header[name]["data_offsets"]), "[0, Infinity]", 1
        )
    else:
        text = json.dumps(header)[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}"
    raw = text.encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + length :])
    code, _, err = _run(capsys, "inspect", str(folder))
    assert code == 2, err
    line = _one_line(err)
    assert "model.safetensors is not a valid safetensors file" in line
    assert ("Infinity" in line) if case == "infinity_offsets" else ("nested" in line)


def test_a_hub_answering_a_web_page_is_one_clear_line(hub, capsys):
    hub.state.portal = True
    code, _, err = _run(capsys, "inspect", "some-org/some-model")
    assert code == 2
    line = _one_line(err)
    assert "answered with a web page" in line and "captive portal" in line


def _far_token(folder: Path) -> None:
    """A tokenizer token past the vocabulary, used by the chat template."""

    def add(tok: dict) -> None:
        tok["added_tokens"].append(
            {"id": 5000, "content": "<|far|>", "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True}
        )  # fmt: skip

    _edit_json(folder / "tokenizer.json", add)
    _edit_json(
        folder / "tokenizer_config.json",
        lambda c: c.update(chat_template="<|far|>" + c["chat_template"]),
    )


def test_a_token_id_past_the_vocabulary_names_the_tokenizer_not_a_conversion_bug(
    tiny, package, tmp_path
):
    from tests.app.test_hostile import _cli

    folder = _copy(tiny, tmp_path)
    _far_token(folder)
    out = tmp_path / "out"
    code, err, _ = _cli("convert", str(folder), "-o", str(out))
    assert code == 2, err[-2000:]
    line = _one_line(err)  # ONNX Runtime's own log line never comes
    assert f"tokenizer.json of {folder}" in line and "id 5,000" in line and "391" in line
    assert "conversion bug" not in line and not out.exists()
    pkg = Path(shutil.copytree(package("qwen2_5_vl"), tmp_path / "pkg"))
    _far_token(pkg)
    code, err, _ = _cli("chat", str(pkg), "--prompt", "hi", "--max-new-tokens", "2")
    assert code == 2, err[-2000:]
    line = _one_line(err)
    assert f"tokenizer.json of {pkg}" in line and "id 5,000" in line


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("one_part_merge", "model.merges[3] is ['a'], not a pair"),
        ("string_merge", "model.merges[0] is 'onlyonepart', not a pair"),
        ("bad_regex", "pre_tokenizer.pretokenizers[0].pattern.Regex is the regex '(unclosed['"),
    ],
)
def test_a_malformed_tokenizer_names_its_file_and_field_not_a_conversion_bug(
    tiny, tmp_path, capsys, case, says
):
    folder = _copy(tiny, tmp_path)

    def spoil(tok: dict) -> None:
        if case == "one_part_merge":
            tok["model"]["merges"][3] = ["a"]
        elif case == "string_merge":
            tok["model"]["merges"][0] = "onlyonepart"
        else:
            split = {"type": "Split", "pattern": {"Regex": "(unclosed["}, "behavior": "Isolated"}
            tok["pre_tokenizer"] = {
                "type": "Sequence",
                "pretokenizers": [split, tok["pre_tokenizer"]],
            }

    _edit_json(folder / "tokenizer.json", spoil)
    out = tmp_path / "out"
    code, _, err = _run(capsys, "convert", str(folder), "-o", str(out))
    assert code == 2
    line = _one_line(err)
    assert f"tokenizer.json of {folder}: {says}" in line and "conversion bug" not in line
    assert not out.exists()


@pytest.mark.parametrize("command", ["inspect", "convert"])
def test_a_200_mb_tokenizer_is_refused_unread(tiny, tmp_path, command):
    from tests.app.test_hostile import _cli

    folder = _copy(tiny, tmp_path)
    with (folder / "tokenizer.json").open("r+b") as f:  # 200 MB (sparse: quick to make)
        f.truncate(200 << 20)
    argv = [command, str(folder)] + (["-o", str(tmp_path / "out")] if command == "convert" else [])
    code, err, took = _cli(*argv)
    assert code == 2, err[-2000:]
    line = _one_line(err)
    assert "tokenizer.json (209,715,200 bytes) is larger than the 67,108,864 bytes" in line
    assert took < 30


@pytest.mark.parametrize("name", ["tokenizer_config.json", "processor_config.json"])
def test_a_package_file_that_is_a_fifo_is_refused_not_waited_on(package, tmp_path, name):
    from tests.app.test_hostile import _cli

    pkg = Path(shutil.copytree(package("qwen2_5_vl"), tmp_path / "pkg"))
    (pkg / name).unlink()
    os.mkfifo(pkg / name)  # ONNX Runtime GenAI would wait on it for ever
    code, err, took = _cli("chat", str(pkg), "--prompt", "hi", "--max-new-tokens", "2")
    assert code == 2, err[-2000:]
    assert name in _one_line(err) and "not a regular file" in _one_line(err)
    assert took < 30


def test_sigterm_while_chat_loads_the_model_asks_nothing_and_exits_130(package, tmp_path):
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "mmforge.app", "chat", str(package("qwen2_5_vl")), "--prompt",
         "hi", "--max-new-tokens", "4000", "--save"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")},
    )  # fmt: skip
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    try:
        deadline = time.monotonic() + 60
        while not (children.exists() and children.read_text().strip()):  # the worker is up
            assert proc.poll() is None and time.monotonic() < deadline, "no worker seen"
            time.sleep(0.01)
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert time.monotonic() - start < 10
    assert out == "" and "cancelled" in err
    assert not list((tmp_path / "data").rglob("conversation.json"))  # nothing was asked
