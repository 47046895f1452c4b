"""Every config field of a converted family is honoured, refused or inert, and tested so."""

from __future__ import annotations

import copy
import functools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.convert import convert
from mmforge.backend.errors import MmforgeError
from mmforge.backend.families import ALL, Cfg
from mmforge.backend.families._fields import flatten, review
from mmforge.backend.tiny.build import with_config, write_tiny
from mmforge.backend.verify import verify
from tests.backend.families import verdict
from tests.conftest import approximated

# (Phi-3.5-Vision is remote code only: its table is read against its release-shaped
# checkpoint in tests/backend/test_phi3v.py, as it has no transformers config class.)
CONVERTED = [f for f in ALL if f.package is not None and f.fixtures.tiny is not None]


def test_every_converted_family_has_a_tiny_or_a_release_shaped_checkpoint():
    for family in ALL:
        if family.package is not None:
            has = family.fixtures.tiny or family.fixtures.released or family.fixtures.remote_release
            assert has, family.key


def _tiny_config(family) -> dict[str, Any]:
    return copy.deepcopy(_tiny_config_of(family.key))


@functools.cache
def _tiny_config_of(family_key: str) -> dict[str, Any]:
    from mmforge.backend.tiny import specs
    from mmforge.backend.tiny.tokenizer import train_tokenizer

    spec = specs()[family_key]
    tok = train_tokenizer(spec.specials, pinned=spec.pinned)
    return spec.make_config(tok.special_ids, tok.vocab_size).to_dict()


@pytest.mark.parametrize("family", CONVERTED, ids=lambda f: f.key)
def test_every_field_of_the_config_class_is_in_the_table(family):
    import transformers

    config_class = type(transformers.AutoConfig.for_model(family.recognition.model_types[0]))
    defaults = review(family.profile.fields, config_class().to_dict())
    assert defaults.unlisted == ()  # (a default may be refused: Pixtral's GELU for Mistral 3)
    tiny = review(family.profile.fields, _tiny_config(family))
    assert tiny.unlisted == ()
    assert tiny.refused == (), [r.sentence() for r in tiny.refused]
    assert tiny.honoured > 10


def _unsupported(rule, value: Any, cfg: Cfg) -> Any:
    candidates = ["unsupported", "all", -7, 0.123, True, False, None, [1, 2], 10**9, 0]
    return next(c for c in candidates if not rule.allows(c, cfg) and c != value)


def _set(config: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = config
    for part in parents:
        node = node[part]
    node[last] = value


def _checked_cases():
    for family in CONVERTED:
        config = _tiny_config(family)
        for path, _value in flatten(config):
            rule = next((r for r in family.profile.fields if r.path == path), None)
            if rule is not None and rule.kind == "checked":
                yield pytest.param(family, path, id=f"{family.key}:{path}")


@pytest.mark.parametrize(("family", "path"), list(_checked_cases()))
def test_each_checked_field_with_another_value_is_refused_naming_it(family, path):
    config = _tiny_config(family)
    rule = next(r for r in family.profile.fields if r.path == path)
    current = dict(flatten(config))[path]
    bad = _unsupported(rule, current, Cfg(config))
    changed = copy.deepcopy(config)
    _set(changed, path, bad)
    refused = review(family.profile.fields, changed).refused
    assert [r.path for r in refused] == [path]
    sentence = refused[0].sentence()
    assert path in sentence and repr(bad) in sentence and rule.supported in sentence


def _variant(tiny_root: Path, family_key: str, name: str, overrides: dict[str, Any]) -> Path:
    """The family's tiny checkpoint with config fields changed (vectors noised)."""
    from mmforge.backend.tiny import specs

    spec = specs()[family_key]
    varied = with_config(spec, overrides)
    return write_tiny(varied, tiny_root / f"{family_key}-{name}").folder


def test_a_refused_field_stops_convert_before_any_graph_and_inspect_lists_it(tiny, tmp_path):
    # Qwen3.5's DeltaNet convolution is built with SiLU; transformers reads hidden_act there.
    folder = tmp_path / "qwen3_5"
    shutil.copytree(tiny("qwen3_5"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["text_config"]["hidden_act"] = "gelu"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(MmforgeError) as e:
        convert(str(folder), tmp_path / "out")
    message = e.value.user_message
    assert "text_config.hidden_act = 'gelu' (supported: 'silu')" in message
    assert not (tmp_path / "out").exists()
    from mmforge.backend.inspect import inspect_source

    profile = inspect_source(str(folder))
    assert profile.refused_fields[0].startswith("text_config.hidden_act = 'gelu'")
    assert profile.warnings[0].startswith("Cannot convert")


# Per family (its expect.py), honoured fields set away from the tiny values, together. Each
# set changes transformers' output (checked below), and the package must still match it.
HONOURED = {f.key: f.fixtures.expect.honoured for f in ALL if f.fixtures.expect.honoured}


@pytest.mark.parametrize("family_key", list(HONOURED))
def test_honoured_fields_with_other_values_still_match_transformers(
    tiny_root, tmp_path, family_key
):
    base = _variant(tiny_root, family_key, "noised", {})
    changed = _variant(tiny_root, family_key, "honoured", HONOURED[family_key])
    base_package, package = tmp_path / "base", tmp_path / "changed"
    consent = approximated(family_key)  # InternVL: one view a picture, with consent
    convert(str(base), base_package, approximate=consent)
    convert(str(changed), package, approximate=consent)
    usual = verdict(family_key)
    report = verify(package, str(changed), tokens=8)
    assert report.verdict == usual, [(c.name, c.verdict, c.reason) for c in report.components]
    # Not vacuous: the unchanged package does not match transformers on the changed config.
    assert verify(base_package, str(changed), tokens=8).verdict == "FAIL"


def test_a_checkpoint_tensor_no_graph_uses_stops_the_conversion(tiny, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "mistral3"
    shutil.copytree(tiny("mistral3"), folder)
    weights = load_file(folder / "model.safetensors")
    name = next(n for n in weights if n.endswith("multi_modal_projector.linear_1.weight"))
    bias = name.replace(".weight", ".bias")
    weights[bias] = weights[name][:, 0].clone() * 0 + 0.5
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(MmforgeError) as e:
        convert(str(folder), tmp_path / "out")
    said = e.value.user_message
    assert f"its tensor {bias} [" in said and "has no place in them" in said and "{" not in said


def test_a_config_that_disagrees_with_its_weights_names_both_shapes(tiny, tmp_path):
    """config.json sized the graphs one way and the weights were another: the error named
    the graph's side only, counted each weight twice and blamed an unsupported layout."""
    folder = tmp_path / "qwen"
    shutil.copytree(tiny("qwen2_5_vl"), folder)
    config = json.loads((folder / "config.json").read_text())
    text = config["text_config"]
    width = text["intermediate_size"]
    text["intermediate_size"] = width + 8
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(MmforgeError) as e:
        convert(str(folder), tmp_path / "out")
    said = e.value.one_line()
    layers = text["num_hidden_layers"]
    assert "do not have the shapes its config.json gives" in said
    assert f"is [{width}, {text['hidden_size']}] in the checkpoint, the config makes it " in said
    assert f"({3 * layers} weights differ in all)" in said and "download the model again" in said
    assert not (tmp_path / "out").exists()


def test_tied_or_not_is_what_the_checkpoint_holds(tiny, tmp_path):
    """transformers' rule: a present lm_head is used even when the config ties; an absent
    one ties when the config says so, and is refused when it does not."""
    from safetensors.torch import load_file, save_file

    def variant(name: str, tie: bool | None, keep_head: bool) -> Path:
        folder = tmp_path / name
        shutil.copytree(tiny("qwen2_5_vl"), folder)
        config = json.loads((folder / "config.json").read_text())
        for level in (config, config["text_config"]):
            level.pop("tie_word_embeddings", None)
            if tie is not None:
                level["tie_word_embeddings"] = tie
        (folder / "config.json").write_text(json.dumps(config))
        if not keep_head:
            weights = load_file(folder / "model.safetensors")
            del weights["lm_head.weight"]
            save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
        return folder

    for name, tie, keep in (("tie-with-head", True, True), ("tie-no-head", True, False)):
        folder = variant(name, tie, keep)
        assert Checkpoint.read(folder).output_tied is (not keep)
        convert(str(folder), tmp_path / f"{name}-pkg")
        report = verify(tmp_path / f"{name}-pkg", str(folder), tokens=8)
        assert report.verdict == "PASS", name
    with pytest.raises(MmforgeError, match="would start the output layer from random values"):
        convert(str(variant("default-no-head", None, False)), tmp_path / "refused")
