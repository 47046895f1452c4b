"""The one reader for JSON from strangers, and the one escape for the terminal."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from mmforge.backend.errors import MmforgeError
from mmforge.backend.untrusted import (
    TOKENIZER_LIMIT,
    escape,
    parse_json,
    read_json_file,
    read_json_object,
)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('{"size": {"longest_edge": 1e400}}', "size.longest_edge is 1e400, not a finite number"),
        ('{"image_std": [0.5, Infinity, 0.5]}', "image_std[1] is Infinity"),
        ('{"a": -Infinity}', "a is -Infinity"),
        ('{"rope": {"factor": NaN}}', "rope.factor is NaN"),
        ('{"vocab_size": ' + "9" * 5000 + "}", "vocab_size is 999999999999…(5,000 characters)"),
        ('{"ids": [1, -' + "7" * 50 + "]}", "ids[1] is"),
    ],
)
def test_numbers_out_of_bounds_are_refused_naming_the_file_and_field(text, named):
    with pytest.raises(MmforgeError) as e:
        parse_json(text, "preprocessor_config.json")
    line = e.value.one_line()
    assert line.startswith("preprocessor_config.json: ") and named in line


def test_ordinary_numbers_and_text_pass_unchanged():
    data = {"a": 1, "b": -2.5e-3, "c": [10**30, 0.0], "d": "\u202e text", "e": None, "f": True}
    assert parse_json(json.dumps(data), "x.json") == data


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested more than 64 levels"),
        ("[" * 70 + "]" * 70, "nested more than 64 levels"),
        ("<!DOCTYPE html><html>portal</html>", "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
    ],
)
def test_deep_nesting_and_non_json_are_one_clear_error(text, says):
    with pytest.raises(MmforgeError, match=says):
        parse_json(text, "config.json")


def test_a_file_over_its_limit_is_refused_without_reading_it_whole(tmp_path):
    path = tmp_path / "tokenizer.json"
    with path.open("wb") as f:  # 200 MB, sparse: nothing is written but the size
        f.truncate(200 << 20)
    start = time.monotonic()
    with pytest.raises(
        MmforgeError, match=r"\(209,715,200 bytes\) is larger than the 67,108,864 bytes"
    ):
        read_json_file(path, "tokenizer", limit=TOKENIZER_LIMIT)
    assert time.monotonic() - start < 2


def test_a_fifo_named_as_a_metadata_file_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "config.json")  # opening it to read would block for ever
    with pytest.raises(MmforgeError, match=r"config\.json is not a regular file"):
        read_json_object(tmp_path / "config.json", "model")


def test_a_file_that_holds_no_object_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(MmforgeError, match="does not hold a JSON object"):
        read_json_object(tmp_path / "config.json", "model")
    with pytest.raises(MmforgeError, match=r"has no config\.json"):
        read_json_object(tmp_path / "missing" / "config.json", "model")


def test_escape_shows_control_and_bidi_characters_as_escapes():
    hostile = "a\x1b]0;PWNED\x07\x1b[31mb\x9b2J\x7f\u202eevil\u2066\r\x00"
    shown = escape(hostile)
    assert shown == ("a\\x1b]0;PWNED\\x07\\x1b[31mb\\x9b2J\\x7f\\u202eevil\\u2066\\x0d\\x00")
    assert shown.isprintable()
    assert escape("line\n\ttab", keep="\n\t") == "line\n\ttab"
    assert escape("line\n") == "line\\x0a"
    # Other scripts, emoji and their joiners are text, not controls.
    assert escape("日本語 👩\u200d💻 é") == "日本語 👩\u200d💻 é"


def test_a_reader_of_many_files_uses_the_one_reader():
    """Every JSON file from a checkpoint, a package or the hub is read through untrusted."""
    root = Path(__file__).resolve().parents[2] / "backend"
    allowed = {"untrusted.py", "protocol.py", "templates.py"}  # own pipes between processes
    offenders = []
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path.name in allowed or "tiny" in path.parts:
            continue
        if "json.loads(" in text or "json.load(" in text:
            offenders.append(path.relative_to(root).as_posix())
    # Files written by mmforge itself for itself (the known-models list). Saved
    # conversations are read through it too: anyone can edit them (issue 47).
    assert sorted(offenders) == ["known_models.py"], offenders
