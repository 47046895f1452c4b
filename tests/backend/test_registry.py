"""The registry lists every family folder: a folder left out would never be reached."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mmforge.backend import families
from mmforge.backend.errors import MmforgeError

LIBRARY = "components"  # what the families share: a library under them, not a family


def test_every_family_folder_is_in_the_registry():
    here = Path(families.__file__).parent
    folders = {p.parent.name for p in here.glob("*/__init__.py")} - {LIBRARY}
    assert folders <= set(families.FOLDERS)
    for name in families.FOLDERS:  # a folder, or a module (others.py)
        assert (here / name / "__init__.py").is_file() or (here / f"{name}.py").is_file()


def test_the_import_contracts_hold_every_family_folder_apart():
    """pyproject.toml's contracts name every family folder: one left out could import
    another family, or be imported by the shared library, and lint-imports would not say."""
    import tomllib

    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    contracts = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["importlinter"]
    folders = {f"mmforge.backend.families.{name}" for name in families.FOLDERS}
    independent = [c for c in contracts["contracts"] if c["type"] == "independence"]
    assert [set(c["modules"]) for c in independent] == [folders]
    library = f"mmforge.backend.families.{LIBRARY}"
    below = [c for c in contracts["contracts"] if library in c.get("source_modules", ())]
    assert [set(c["forbidden_modules"]) for c in below] == [folders]


def _owns_the_default_config(family: families.Family) -> bool:
    """Whether transformers' default config of the family's model_type is this family's.

    Pixtral-12B shares `llava` with LLaVA-1.5, whose CLIP tower the default config has.
    A default config the family refuses is not its own either: transformers' LlavaConfig
    puts <image> at 32,000, past its 32,000-token vocabulary (bounds.py), where LLaVA-1.5's
    release has 32,064 tokens.
    """
    import transformers

    from mmforge.backend.bounds import check_token_ids
    from mmforge.backend.errors import MmforgeError

    model_type = family.recognition.model_types[0]
    if model_type not in transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES:
        return False
    config = transformers.AutoConfig.for_model(model_type).to_dict()
    request = families.VariantRequest(config, Path())
    if (family.recognition.variant(request) or family) is not family:
        return False
    try:
        check_token_ids(config, Path("config.json"), family.converts)
    except MmforgeError:
        return False
    return True


def _unstated(family: families.Family) -> list[str]:
    """What a tested family's expect.py leaves unsaid."""

    expect = family.fixtures.expect
    missing = []
    if not expect.tiny_tokens:
        missing.append(f"{family.key}: tiny_tokens (inspect on its tiny checkpoint)")
    if not expect.honoured:
        missing.append(f"{family.key}: honoured (fields set away from the tiny values)")
    if expect.default_config is None and _owns_the_default_config(family):
        missing.append(f"{family.key}: default_config (inspect on transformers' config)")
    # A family that converts only as an approximation (InternVL) never PASSes: its good
    # package is APPROXIMATE, and only such a family's is.
    allowed = ("APPROXIMATE",) if family.approximation is not None else ("PASS", "AMBIGUOUS")
    if expect.verdict not in allowed:
        missing.append(f"{family.key}: a good package's verdict is {expect.verdict}")
    if expect.verdict != "PASS" and not expect.verdict_reason:
        missing.append(f"{family.key}: why its verdict is {expect.verdict}")
    assert family.package is not None
    rounded = {*expect.quantized, *(d for _, d in expect.released_rounded)}
    if "int4" in family.package.dtypes and "int4" not in rounded:
        missing.append(f"{family.key}: an int4 check against its own rounded weights")
    released = {r.key for r in family.fixtures.released}
    strays = [k for k, _ in expect.released_rounded if k not in released]
    missing += [f"{family.key}: release {k} is not its own" for k in strays]
    return missing


def test_every_tested_family_states_what_the_tests_expect_of_it():
    """One completeness check over each family's expect.py: a family added to the registry
    is not covered until it says what inspect, verify and the field tests must find."""
    from tests.backend.families import TESTED

    missing = [m for f in families.ALL if f.key in TESTED for m in _unstated(f)]
    assert not missing, missing


def test_an_expectation_left_out_is_named():
    qwen = families.lookup("qwen2_5_vl")
    bare = dataclasses.replace(
        qwen, fixtures=dataclasses.replace(qwen.fixtures, expect=families.Expectations())
    )
    missing = _unstated(bare)
    assert any("tiny_tokens" in m for m in missing) and any("int4" in m for m in missing)
    assert any("honoured" in m for m in missing) and any("default_config" in m for m in missing)


THROWAWAY = """
import dataclasses

from mmforge.backend.families import Expectations, Fixtures, Recognition, lookup

QWEN = lookup("qwen2_5_vl")
THROWAWAY = dataclasses.replace(
    QWEN,
    key="throwaway",
    name="Throwaway-VL",
    recognition=Recognition(model_types=("throwaway_vl",)),
    fixtures=Fixtures(
        tiny=dataclasses.replace(QWEN.fixtures.tiny, family_key="throwaway"),
        expect=dataclasses.replace(QWEN.fixtures.expect, default_config=None),
    ),
)
FAMILIES = (THROWAWAY,)
"""


def test_a_family_is_its_folder_and_one_registry_line(tmp_path, monkeypatch):
    """A throwaway family: its folder, and its name added to the registry's folder list."""
    import sys

    from mmforge.backend.families import catalog

    (tmp_path / "throwaway").mkdir()
    (tmp_path / "throwaway" / "__init__.py").write_text(THROWAWAY)
    monkeypatch.setattr(families, "__path__", [*families.__path__, str(tmp_path)])
    try:
        registry = families.Registry((*families.FOLDERS, "throwaway"))  # the one line
    finally:
        sys.modules.pop("mmforge.backend.families.throwaway", None)
    entry = registry.lookup("throwaway_vl")
    assert entry.key == "throwaway" and entry.pipeline_type == "qwen2_5_vl"
    assert registry.by_pipeline["qwen2_5_vl"].key == "qwen2_5_vl"  # the first still owns it
    assert registry.lookup("qwen2_5_vl").key == "qwen2_5_vl"
    assert registry.all[-1] is entry and len(registry.all) == len(families.ALL) + 1
    assert _unstated(entry) == []
    row = "| Throwaway-VL | `throwaway_vl` | converts exactly |"
    assert row in catalog.table(registry.all) and row not in catalog.table()
    with pytest.raises(MmforgeError, match="Unknown model_type 'throwaway_vl'"):
        families.lookup("throwaway_vl")  # the shipped registry does not have it


def test_the_family_table_in_the_docs_is_the_registry_s():
    from mmforge.backend.families import catalog

    doc = Path(__file__).parents[2] / "docs" / "families.md"
    text = doc.read_text(encoding="utf-8")
    assert catalog.rewrite(text) == text, (
        "docs/families.md is stale: python -m mmforge.backend.families.catalog "
        "--write docs/families.md"
    )
    n = catalog.counts()
    assert f"{n[catalog.EXACT]} families convert exactly" in text


def test_inspect_only_families_state_what_inspect_finds():
    import transformers

    mapping = transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES
    for family in families.ALL:
        if family.package is None and family.recognition.model_types[0] in mapping:
            assert family.fixtures.expect.default_config is not None, family.key


def test_the_readme_counts_the_families_as_the_registry_does():
    from mmforge.backend.families import catalog

    for name in ("README.md", "resources/user_guide.md"):
        text = (Path(__file__).parents[2] / name).read_text(encoding="utf-8")
        assert f"<!-- families: count -->\n{catalog.sentence()}\n" in text, name
