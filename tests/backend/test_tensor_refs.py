"""Checkpoint tensor references: one expert of a fused tensor is read on its own."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from mmforge.backend.tensors import checkpoint_refs


@pytest.fixture
def fused(tmp_path):
    gen = torch.Generator().manual_seed(0)
    weights = {
        "experts.gate_up_proj": torch.randn((6, 8, 5), generator=gen).to(torch.bfloat16),
        "plain.weight": torch.randn((4, 3), generator=gen),
    }
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    return tmp_path, weights


def test_picking_one_expert_reads_only_its_bytes(fused, monkeypatch):
    folder, weights = fused
    ref = checkpoint_refs(folder)["experts.gate_up_proj"]
    counts = []
    real = np.fromfile

    def counting(*args, **kwargs):
        counts.append(kwargs["count"])
        return real(*args, **kwargs)

    monkeypatch.setattr(np, "fromfile", counting)  # (tensors imports numpy where it reads)
    full = weights["experts.gate_up_proj"]
    for key in (2, -1, (3, slice(None, 4)), (4, slice(4, None))):
        got = ref[key].read()
        assert torch.equal(got, full[key]), key
    assert counts == [8 * 5] * 4  # one expert each time, never the 6
    both = ref[1].t().read()  # later operations still apply
    assert torch.equal(both, full[1].t())


def test_other_reads_are_unchanged(fused):
    folder, weights = fused
    refs = checkpoint_refs(folder)
    assert torch.equal(refs["plain.weight"].read(), weights["plain.weight"])
    assert torch.equal(refs["plain.weight"][1:3].read(), weights["plain.weight"][1:3])
    assert torch.equal(
        refs["experts.gate_up_proj"][:, 2].read(), weights["experts.gate_up_proj"][:, 2]
    )
