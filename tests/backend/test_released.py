"""Checkpoints shaped like the hub releases convert and match transformers token for token.

Each is built from its release's config.json text (transformers 4 key names, defaults
left out), in bfloat16 under the release's tensor names, in two shards: see
`backend/tiny/release.py` and each family's `tiny.py`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.convert import convert
from mmforge.backend.families import ALL
from mmforge.backend.tiny.release import write_release
from mmforge.backend.verify import verify

RELEASED = {r.key: r for f in ALL for r in f.released}
# Gemma 4's runtime wraps image and audio blocks in blank lines (documented): preprocessing
# is AMBIGUOUS while every graph and all 32 tokens match.
VERDICT = {"gemma4": "AMBIGUOUS"}

_built: dict[str, Path] = {}


@pytest.fixture(scope="session")
def released(tiny_root: Path):
    def get(key: str) -> Path:
        if key not in _built:
            _built[key] = write_release(RELEASED[key], tiny_root / f"released-{key}").folder
        return _built[key]

    return get


def test_every_converted_family_has_a_release_shaped_checkpoint():
    converted = {f.key for f in ALL if f.package is not None}
    assert converted - {"phi4mm"} <= {r.tiny.family_key for r in RELEASED.values()}
    assert "ministral3-3b" in RELEASED


def test_release_shaped_checkpoints_are_shaped_like_releases(released):
    from mmforge.backend.tiny.tokenizer import train_tokenizer

    for key, spec in RELEASED.items():
        folder = released(key)
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        shards = set(index["weight_map"].values())
        assert len(shards) == 2
        for shard in shards:  # bfloat16, as released
            header = _header(folder / shard)
            assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"BF16"}
        tok = train_tokenizer(spec.tiny.specials, pinned=spec.tiny.pinned)
        expected = spec.config_json(tok.special_ids, tok.vocab_size)
        assert json.loads((folder / "config.json").read_text()) == expected  # the text as is


def _header(path: Path) -> dict:
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(size))


@pytest.mark.parametrize("key", list(RELEASED))
def test_a_release_shaped_checkpoint_matches_transformers_over_32_tokens(released, tmp_path, key):
    folder = released(key)
    checkpoint = Checkpoint.read(folder)
    assert checkpoint.field_review.refused == ()
    convert(str(folder), tmp_path / "pkg")
    report = verify(tmp_path / "pkg", str(folder), tokens=32)
    assert report.verdict == VERDICT.get(key, "PASS"), [
        (c.name, c.verdict, c.reason) for c in report.components
    ]
    assert all(c.verdict == "PASS" for c in report.components if c.name != "preprocessing")
    assert report.tokens["matched"] == report.tokens["total"] == 32


def test_ministral_3_matches_on_both_sides_of_its_original_context(tiny_root, tmp_path):
    """Ministral 3 scales queries past `original_max_position_embeddings` (Llama 4 scaling)
    and its YaRN is built for that length: with it shrunk to 16 positions, the prompt
    and the answer run past it. mobius's fused attention dropped the scaling."""
    spec = RELEASED["ministral3-3b"]

    def config(specials: dict[str, int], vocab: int) -> dict:
        data = spec.config_json(specials, vocab)
        data["text_config"]["rope_parameters"]["original_max_position_embeddings"] = 16
        data["text_config"]["rope_parameters"]["llama_4_scaling_beta"] = 1.0
        return data

    short = dataclasses.replace(spec, key="ministral3-short", config_json=config)
    folder = write_release(short, tiny_root / "released-ministral3-short").folder
    convert(str(folder), tmp_path / "pkg")
    report = verify(tmp_path / "pkg", str(folder), tokens=32)
    assert report.verdict == "PASS", [(c.name, c.verdict, c.reason) for c in report.components]

    def unscaled(specials: dict[str, int], vocab: int) -> dict:
        data = config(specials, vocab)
        data["text_config"]["rope_parameters"]["llama_4_scaling_beta"] = 0.0
        return data

    # Not vacuous: past the boundary the scaling changes transformers' answer.
    plain = dataclasses.replace(spec, key="ministral3-unscaled", config_json=unscaled)
    plain_folder = write_release(plain, tiny_root / "released-ministral3-unscaled").folder
    convert(str(plain_folder), tmp_path / "plain")
    assert verify(tmp_path / "plain", str(folder), tokens=32).verdict == "FAIL"
