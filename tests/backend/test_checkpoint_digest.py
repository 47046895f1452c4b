"""Which model a checkpoint holds: digests that survive copies and tell models apart."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from mmforge.backend.checkpoint_digest import (
    CONFIG_SCHEME,
    SAMPLES,
    WEIGHTS_SCHEME,
    WINDOW,
    checkpoint_digest,
    config_digest,
    weights_digest,
    windows,
)
from mmforge.backend.library import read_package

CONFIG = {
    "model_type": "qwen2_5_vl",
    "hidden_size": 64,
    "text_config": {"num_hidden_layers": 2, "torch_dtype": "bfloat16"},
    "_name_or_path": "org/m",
    "transformers_version": "4.57.0",
}


def _tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "model.embed_tokens.weight": torch.randn(300, 64, generator=g),  # 76,800 bytes
        "model.norm.weight": torch.randn(64, generator=g),
        "lm_head.weight": torch.randn(300, 64, generator=g).to(torch.bfloat16),
    }


def _checkpoint(folder: Path, tensors: dict[str, torch.Tensor], config=CONFIG) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_file(tensors, folder / "model.safetensors")
    return folder


def test_a_copy_in_other_shards_under_other_names_and_reformatted_is_the_same(tmp_path):
    tensors = _tensors()
    original = _checkpoint(tmp_path / "a", tensors)
    copy = tmp_path / "b"
    copy.mkdir()
    renamed = {f"model.language_model.{k}": v for k, v in tensors.items()}
    names = sorted(renamed)
    save_file({n: renamed[n] for n in names[:1]}, copy / "model-00001-of-00002.safetensors")
    save_file({n: renamed[n] for n in names[1:]}, copy / "model-00002-of-00002.safetensors")
    index = {
        "weight_map": {
            n: f"model-0000{1 + (i > 0)}-of-00002.safetensors" for i, n in enumerate(names)
        }
    }
    (copy / "model.safetensors.index.json").write_text(json.dumps(index))
    # Saved elsewhere, by a newer transformers, in another key order, on one line.
    saved = {**CONFIG, "_name_or_path": "/home/u/m", "transformers_version": "5.1.0"}
    (copy / "config.json").write_text(json.dumps(dict(reversed(saved.items()))))

    digest = checkpoint_digest(original)
    assert digest == checkpoint_digest(copy)
    assert digest["config"].startswith(f"{CONFIG_SCHEME}:")
    assert digest["weights"].startswith(f"{WEIGHTS_SCHEME}:")


def test_other_settings_and_other_weights_differ(tmp_path):
    base = checkpoint_digest(_checkpoint(tmp_path / "base", _tensors()))
    wider = {**CONFIG, "text_config": {**CONFIG["text_config"], "num_hidden_layers": 3}}
    deeper = checkpoint_digest(_checkpoint(tmp_path / "deeper", _tensors(), wider))
    assert deeper["config"] != base["config"] and deeper["weights"] == base["weights"]
    # A fine-tune: every value of the large tensor moved a little.
    tuned = _tensors()
    tuned["model.embed_tokens.weight"] += 1e-3
    assert checkpoint_digest(_checkpoint(tmp_path / "tuned", tuned))["weights"] != base["weights"]
    # One value of a small tensor, which is read whole.
    nudged = _tensors()
    nudged["model.norm.weight"][7] += 1
    assert checkpoint_digest(_checkpoint(tmp_path / "nudged", nudged))["weights"] != base["weights"]
    # The same values in another dtype are other weights.
    f32 = _tensors()
    f32["lm_head.weight"] = f32["lm_head.weight"].float()
    assert checkpoint_digest(_checkpoint(tmp_path / "f32", f32))["weights"] != base["weights"]


def test_a_large_tensor_is_read_in_windows_that_reach_both_ends():
    assert windows(100) == [(0, 100)]
    assert windows(SAMPLES * WINDOW) == [(0, SAMPLES * WINDOW)]
    spans = windows(10**9)
    assert len(spans) == SAMPLES and spans[0] == (0, WINDOW) and spans[-1][1] == 10**9
    assert all(b - a == WINDOW for a, b in spans)
    assert all(spans[k][1] <= spans[k + 1][0] for k in range(SAMPLES - 1))


def test_unreadable_or_missing_weights_have_no_digest_and_raise_nothing(tmp_path):
    folder = _checkpoint(tmp_path / "cut", _tensors())
    shard = folder / "model.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])  # the file ends inside a tensor
    assert weights_digest(folder) is None
    assert set(checkpoint_digest(folder)) == {"config"}
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text(json.dumps(CONFIG))
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04")
    assert weights_digest(pickled) is None
    (pickled / "config.json").write_text("{not json")
    assert config_digest(pickled) is None and checkpoint_digest(pickled) == {}


def test_a_conversion_records_the_digest_of_what_it_converted(tiny, package):
    entry = read_package(package("qwen2_5_vl"))
    assert entry is not None
    recorded = checkpoint_digest(tiny("qwen2_5_vl"))
    assert (entry.config_digest, entry.weights_digest) == (recorded["config"], recorded["weights"])
