"""The Hugging Face cache cleaned while a conversion reads it: one clear line, nothing left."""

from __future__ import annotations

import shutil

import pytest

from mmforge.app.cli import main
from tests.backend.test_source import _serve_tiny

REPO = "tiny-org/tiny-qwen"


@pytest.mark.parametrize("after", ["profile_checkpoint", "_build"])
def test_a_cache_deleted_during_a_conversion_is_said_so(
    hub, tiny, tmp_path, capsys, monkeypatch, after
):
    from mmforge.backend.convert import job

    _serve_tiny(hub, tiny)
    real = getattr(job, after)

    def then_clean_the_cache(*args, **kwargs):
        done = real(*args, **kwargs)
        shutil.rmtree(tmp_path / "hf-cache")  # `hf cache delete` from another terminal
        return done

    monkeypatch.setattr(job, after, then_clean_the_cache)
    out = tmp_path / "pkg"
    code = main(["convert", REPO, "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "disappeared while mmforge was reading them" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
