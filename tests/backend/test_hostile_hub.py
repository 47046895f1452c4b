"""A hostile or broken hub: spliced resumes, oversized bodies, gzip bombs, portal pages.

Against the loopback hub of tests/hubserver.py, which sends the hub's own ETags (the git
blob sha-1 of a regular file, the sha-256 of an LFS one).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from mmforge.backend.errors import MmforgeError
from mmforge.backend.source import resolve
from tests.hubserver import hub_etag

REPO = "tiny-org/tiny-qwen"


def _serve(hub, tiny):
    return hub.state.add_folder(REPO, tiny("qwen2_5_vl"))


def _blobs(tmp_path: Path) -> Path:
    return tmp_path / "hf-cache" / ("models--" + REPO.replace("/", "--")) / "blobs"


def _cache_bytes(tmp_path: Path) -> int:
    return sum(p.stat().st_size for p in (tmp_path / "hf-cache").rglob("*") if p.is_file())


def test_the_hub_names_regular_files_by_git_blob_sha1(hub, tiny):
    repo = _serve(hub, tiny)
    data = repo.files["tokenizer_config.json"]
    expected = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert hub_etag("tokenizer_config.json", data) == f'"{expected}"'
    folder = resolve(REPO).folder
    assert (folder / "tokenizer_config.json").read_bytes() == data
    assert (folder / "tokenizer_config.json").resolve().name == expected


def test_a_resume_spliced_from_another_source_is_refused_and_deleted(hub, tiny, tmp_path):
    repo = _serve(hub, tiny)
    name = "tokenizer_config.json"
    data = repo.files[name]
    etag = hub_etag(name, data).strip('"')
    partial = _blobs(tmp_path) / f"{etag}.mmforge-partial"
    partial.parent.mkdir(parents=True)
    rewritten = b'{"chat_template": "{{ evil }}", ' + b" " * len(data)
    partial.write_bytes(rewritten[: len(data) // 2])  # half of another file, to be resumed
    with pytest.raises(MmforgeError) as e:
        resolve(REPO)
    line = e.value.one_line()
    assert f"{name} arrived corrupted" in line and "partial download was deleted" in line
    assert not partial.exists() and not (_blobs(tmp_path) / etag).exists()
    ranges = [r for m, p, r in hub.state.requests if m == "GET" and p.endswith(name)]
    assert ranges == [f"bytes={len(data) // 2}-"]  # it was a resume
    # The next run downloads the file afresh, and it is the hub's.
    assert (resolve(REPO).folder / name).read_bytes() == data


def test_a_fresh_download_that_does_not_match_its_etag_is_refused(hub, tiny, tmp_path):
    repo = _serve(hub, tiny)
    name = "chat_template.jinja"
    repo.files[name] = b"{{ messages }}"
    wrong = hashlib.sha1(b"blob 5\0other").hexdigest()
    hub.state.etags[(REPO, name)] = f'"{wrong}"'  # the hub says one thing, sends another
    with pytest.raises(MmforgeError, match=rf"{name} arrived corrupted"):
        resolve(REPO)
    assert not list(_blobs(tmp_path).glob(f"{wrong}*"))


def test_a_body_longer_than_announced_is_cut_off_at_the_announced_size(hub, tiny, tmp_path):
    repo = _serve(hub, tiny)
    hub.state.extra_bytes[(REPO, "config.json")] = 300 << 20  # 1.7 KB answered with 301 MB
    start = time.monotonic()
    with pytest.raises(MmforgeError, match=r"more of config\.json than the [\d,]+ bytes"):
        resolve(REPO)
    assert time.monotonic() - start < 10
    # Nothing past the announced size was kept (a 256 KiB read at most went to memory).
    assert _cache_bytes(tmp_path) <= len(repo.files["config.json"])
    assert not list(_blobs(tmp_path).glob("*.mmforge-partial"))


def test_a_gzip_bomb_is_not_inflated_past_the_announced_size(hub, tiny, tmp_path):
    repo = _serve(hub, tiny)
    hub.state.gzip_bombs[(REPO, "tokenizer_config.json")] = 64 << 20
    with pytest.raises(MmforgeError, match=r"more of tokenizer_config\.json than"):
        resolve(REPO)
    assert _cache_bytes(tmp_path) <= sum(len(d) for d in repo.files.values())
    assert not list(_blobs(tmp_path).glob("*.mmforge-partial"))


def test_a_huge_repository_answer_is_refused_without_holding_it(hub, tiny):
    _serve(hub, tiny)
    hub.state.info_padding = 40 << 20  # a 40 MB answer: over the 32 MB bound
    with pytest.raises(MmforgeError, match=r"larger than the 33,554,432 bytes"):
        resolve(REPO)


def test_a_captive_portal_in_place_of_the_hub_is_one_clear_error(hub):
    hub.state.portal = True
    with pytest.raises(MmforgeError) as e:
        resolve(REPO)
    line = e.value.one_line()
    assert "answered with a web page" in line and "captive portal" in line
    assert hub.url in line


def test_a_hub_safetensors_header_with_an_infinite_shape_is_not_trusted(hub, tiny):
    import json
    import struct

    from mmforge.backend.inspect import inspect_source

    repo = _serve(hub, tiny)
    data = repo.files["model.safetensors"]
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    name = next(k for k in header if k != "__metadata__")
    text = json.dumps(header).replace(json.dumps(header[name]["shape"]), "[Infinity, 4]", 1)
    raw = text.encode()
    repo.files["model.safetensors"] = struct.pack("<Q", len(raw)) + raw + data[8 + length :]
    profile = inspect_source(REPO)  # read by range from the hub: no download, no crash
    assert profile.sizes.source != "hub safetensors headers"


def test_an_empty_regular_file_is_fetched_and_checked(hub, tiny):
    repo = _serve(hub, tiny)
    repo.files["added_tokens.json"] = b""
    folder = resolve(REPO).folder
    assert (folder / "added_tokens.json").read_bytes() == b""


def test_a_metadata_file_announced_larger_than_any_is_not_fetched(hub, tiny, tmp_path):
    _serve(hub, tiny)
    hub.state.sizes[(REPO, "tokenizer.json")] = str(200 << 20)  # a 200 MB tokenizer.json
    with pytest.raises(MmforgeError, match=r"tokenizer\.json is 209,715,200 bytes, more than"):
        resolve(REPO)
    assert not [p for m, p, _ in hub.state.requests if m == "GET" and p.endswith("tokenizer.json")]
