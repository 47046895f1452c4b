"""The files beside config.json are a stranger's too: each malformed one is refused as
the file's fault, naming the file and the value, before a package is written.

Before, each of these converted and then the runtime could not load the package (called
"a conversion bug"), or mmforge crashed (exit 70).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mmforge.backend.convert import convert
from mmforge.backend.errors import MmforgeError

Edit = Callable[[dict[str, Any]], object]

CASES: dict[str, tuple[str, Edit | str, str]] = {
    "mean of two": (
        "preprocessor_config.json",
        lambda c: c.update(image_mean=[0.5, 0.5]),
        "image_mean is [0.5, 0.5], not one number or three",
    ),
    "std of zero": (
        "preprocessor_config.json",
        lambda c: c.update(image_std=[0, 0, 0]),
        "image_std is [0, 0, 0]; pixels are divided by it",
    ),
    "min above max": (
        "preprocessor_config.json",
        lambda c: c.update(min_pixels=10**6, max_pixels=100),
        "min_pixels 1,000,000 is above max_pixels 100",
    ),
    "zero patch": (
        "preprocessor_config.json",
        lambda c: c.update(patch_size=0),
        "patch_size is 0, not a positive count",
    ),
    "eos as text": (
        "generation_config.json",
        lambda c: c.update(eos_token_id="x"),
        "eos_token_id is 'x', which is not a token id",
    ),
    "eos past the vocabulary": (
        "generation_config.json",
        lambda c: c.update(eos_token_id=[10**7]),
        "eos_token_id is 10000000, outside its vocabulary",
    ),
    "template as a number": (
        "tokenizer_config.json",
        lambda c: c.update(chat_template=5),
        "gives a chat_template that is int, not template text",
    ),
    "tokenizer without a model": (
        "tokenizer.json",
        '{"version": "1.0"}',
        "holds no tokenizer model",
    ),
}


def _copy(tiny: Callable[[str], Path], tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(tiny("qwen2_5_vl"), folder)
    return folder


@pytest.mark.parametrize("case", list(CASES))
def test_a_malformed_side_file_is_refused_as_the_files_fault(tiny, tmp_path, case):
    name, edit, expect = CASES[case]
    folder = _copy(tiny, tmp_path)
    path = folder / name
    if isinstance(edit, str):
        path.write_text(edit)
    else:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    with pytest.raises(MmforgeError) as e:
        convert(str(folder), tmp_path / "out")
    said = e.value.one_line()
    assert expect in said and name in said and "conversion bug" not in said
    assert not (tmp_path / "out").exists()


def test_named_chat_templates_become_the_default_ones_text(tiny, tmp_path):
    """transformers accepts a list of named templates; the runtime reads one string (a
    list stopped it loading the package)."""
    folder = _copy(tiny, tmp_path)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    template = config["chat_template"]
    config["chat_template"] = [
        {"name": "tool_use", "template": "{{ 'tools' }}"},
        {"name": "default", "template": template},
    ]
    config_path.write_text(json.dumps(config))
    convert(str(folder), tmp_path / "out")
    written = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert written["chat_template"] == template
