"""Resolving sources: local folders, and hub downloads against a local hub server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mmforge.backend.download import PROGRESS_CHUNK
from mmforge.backend.errors import Cancelled, MmforgeError
from mmforge.backend.jobs import JobContext, Progress
from mmforge.backend.source import parse_source, resolve

REPO = "tiny-org/tiny-qwen"


BIG = "model-extra.safetensors"


def _big_safetensors() -> bytes:
    """A 24 MB safetensors file: a cut or cancel after 10 MB leaves bytes to resume from."""
    import numpy as np
    from safetensors.numpy import save

    return save({"extra.weight": np.arange(6_000_000, dtype=np.float32)})


def _serve_tiny(hub, tiny, big: bool = False, **kwargs):
    repo = hub.state.add_folder(REPO, tiny("qwen2_5_vl"), **kwargs)
    if big:
        repo.files[BIG] = _big_safetensors()
    repo.files["README.md"] = b"# not needed"
    repo.files["pytorch_model.bin"] = b"pickled, never fetched when safetensors exist"
    return repo


def _events() -> tuple[list[Progress], JobContext]:
    events: list[Progress] = []
    return events, JobContext(on_progress=events.append, min_interval_s=0)


def test_parse_source_tells_folders_from_hub_ids(tmp_path):
    assert parse_source(str(tmp_path)).local_path == tmp_path.resolve()
    s = parse_source("org/name@v1.0")
    assert (s.repo_id, s.revision) == ("org/name", "v1.0")
    for bad in ("/no/such/folder", "./missing", "just-a-name", "a/b/c", ""):
        with pytest.raises(MmforgeError):
            parse_source(bad)


def test_download_for_conversion_fetches_what_conversion_needs(hub, tiny, tmp_path):
    _serve_tiny(hub, tiny)
    events, ctx = _events()
    r = resolve(REPO, ctx, purpose="convert")
    names = sorted(p.name for p in r.folder.iterdir())
    assert "model.safetensors" in names and "config.json" in names and "tokenizer.json" in names
    assert "README.md" not in names and "pytorch_model.bin" not in names
    assert r.commit == hub.state.repos[REPO].sha
    fetched = {p.rsplit("/", 1)[-1] for m, p, _ in hub.state.requests if m == "GET"}
    assert "pytorch_model.bin" not in fetched and "README.md" not in fetched
    byte_events = [e for e in events if e.unit == "bytes" and e.total]
    assert (
        byte_events[-1].done
        == byte_events[-1].total
        == sum((r.folder / n).stat().st_size for n in r.files)
    )
    assert [e.done for e in byte_events] == sorted(e.done for e in byte_events)
    # The second run finds everything in the cache and fetches no file again.
    hub.state.requests.clear()
    resolve(REPO, purpose="convert")
    assert not [p for m, p, _ in hub.state.requests if m == "GET" and "/resolve/" in p]


def test_inspect_fetches_metadata_only_and_reads_weight_headers_by_range(hub, tiny):
    from mmforge.backend.inspect import inspect_source

    _serve_tiny(hub, tiny)
    p = inspect_source(REPO)
    assert p.family_key == "qwen2_5_vl"
    assert p.sizes.source == "hub safetensors headers"
    assert p.sizes.parameters["total"] > 100_000
    weight_gets = [(m, r) for m, p_, r in hub.state.requests if p_.endswith("model.safetensors")]
    assert weight_gets and all(r is not None for m, r in weight_gets if m == "GET")
    assert not Path(p.folder, "model.safetensors").exists()


def test_a_cut_connection_resumes_with_a_range_request(hub, tiny):
    _serve_tiny(hub, tiny, big=True)
    hub.state.cut_after[(REPO, BIG)] = 12_000_000
    r = resolve(REPO, purpose="convert")
    assert (r.folder / BIG).read_bytes() == hub.state.repos[REPO].files[BIG]
    ranges = [rng for m, p, rng in hub.state.requests if m == "GET" and p.endswith(BIG)]
    # The first request had no range; the retry continued from the last whole chunk.
    assert (
        ranges[0] is None and ranges[1] == f"bytes={12_000_000 // PROGRESS_CHUNK * PROGRESS_CHUNK}-"
    )


def test_cancel_mid_file_then_resume_on_the_next_run(hub, tiny):
    _serve_tiny(hub, tiny, big=True)
    ctx = JobContext(min_interval_s=0)
    started = sum(len(d) for n, d in hub.state.repos[REPO].files.items() if n != BIG)

    def cancel_in_the_big_file(e: Progress) -> None:
        if e.unit == "bytes" and e.done > started + 11_000_000:
            ctx.cancel.cancel()

    ctx.on_progress = cancel_in_the_big_file
    with pytest.raises(Cancelled):
        resolve(REPO, ctx, purpose="convert")
    hub.state.requests.clear()
    r = resolve(REPO, purpose="convert")
    assert (r.folder / BIG).read_bytes() == hub.state.repos[REPO].files[BIG]
    ranges = [rng for m, p, rng in hub.state.requests if m == "GET" and p.endswith(BIG)]
    assert len(ranges) == 1 and ranges[0] is not None
    resumed_at = int(ranges[0].removeprefix("bytes=").rstrip("-"))
    assert 10_000_000 < resumed_at < len(hub.state.repos[REPO].files[BIG])


def test_gated_repo_needs_a_token(hub, tiny):
    _serve_tiny(hub, tiny, gated_token="hf_test_secret")
    with pytest.raises(MmforgeError) as e:
        resolve(REPO, purpose="convert")
    assert "gated" in e.value.one_line() and "hf auth login" in e.value.one_line()
    assert "hf_test_secret" not in e.value.one_line()
    r = resolve(REPO, purpose="convert", token="hf_test_secret")
    assert (r.folder / "model.safetensors").is_file()


def test_the_token_goes_to_the_hub_only_never_to_where_a_file_redirects(hub, tiny):
    from tests.hubserver import HubServer, Repo

    repo = _serve_tiny(hub, tiny, gated_token="hf_test_secret")
    with HubServer(host="127.0.0.2") as cdn:  # another host, as the hub's CDN is
        cdn.state.repos[REPO] = Repo(files=repo.files, sha=repo.sha)
        hub.state.redirect_files_to = cdn.url
        r = resolve(REPO, purpose="convert", token="hf_test_secret")
        assert (r.folder / "model.safetensors").read_bytes() == repo.files["model.safetensors"]
    to_hub = [auth for path, auth in hub.state.authorization if "/resolve/" in path]
    to_cdn = [auth for path, auth in cdn.state.authorization]
    assert to_hub and set(to_hub) == {"Bearer hf_test_secret"}  # the gated hub needs it
    assert len(to_cdn) >= 3 and set(to_cdn) == {None}  # every file came from the CDN


def test_a_hostile_commit_from_the_hub_never_becomes_a_path(hub, tiny, tmp_path):
    repo = _serve_tiny(hub, tiny)
    repo.sha = "../../../escaped"
    before = {p for p in tmp_path.iterdir() if p.name != "hf-cache"}
    for purpose in ("inspect", "convert"):
        with pytest.raises(MmforgeError, match="valid commit id"):
            resolve(REPO, purpose=purpose)
    assert {p for p in tmp_path.iterdir() if p.name != "hf-cache"} == before
    assert not any(p.name == "escaped" for p in tmp_path.rglob("*"))


@pytest.mark.parametrize(
    "spec",
    [
        "tiny-org/tiny-qwen@../../outside",
        "tiny-org/tiny-qwen@main/../../x",
        "tiny-org/tiny-qwen@.hidden",
        "org/..",
        "org/a--b",
        "org/x.",
    ],
)
def test_hub_ids_and_revisions_that_could_become_paths_are_refused(spec):
    with pytest.raises(MmforgeError, match=r"not a valid (revision|hub id)"):
        parse_source(spec)


def test_a_file_fetch_checks_every_name_it_makes_a_path_of(tmp_path):
    from mmforge.backend.download import fetch_file

    good = {
        "endpoint": "http://127.0.0.1:9",
        "repo_id": REPO,
        "commit": "0" * 40,
        "revision": "main",
        "filename": "config.json",
        "token": None,
        "cache_dir": tmp_path,
        "on_bytes": lambda n: None,
    }
    bad_names = ("../x.json", "vision-lora/..", "a/b/c.json", "/etc/passwd", "x/.")
    cases = [("commit", "../x"), ("revision", "../../x"), *(("filename", n) for n in bad_names)]
    for key, bad in cases:
        with pytest.raises(MmforgeError, match=r"Not a|not a valid"):
            fetch_file(**{**good, key: bad})
    assert list(tmp_path.iterdir()) == []


def test_a_hub_that_never_answers_ends_in_a_clear_error_and_cancel_reaches_it(
    hub, tiny, monkeypatch
):
    import threading
    import time

    _serve_tiny(hub, tiny)
    hub.state.hang_api = True  # accepts the connection, never answers
    monkeypatch.setenv("MMFORGE_HUB_TIMEOUT", "1")
    start = time.monotonic()
    with pytest.raises(MmforgeError, match="The hub did not answer within 1 s"):
        resolve(REPO)
    assert time.monotonic() - start < 10
    monkeypatch.setenv("MMFORGE_HUB_TIMEOUT", "120")
    ctx = JobContext()
    stopper = threading.Timer(0.5, ctx.cancel.cancel)
    stopper.start()
    start = time.monotonic()
    with pytest.raises(Cancelled):
        resolve(REPO, ctx)
    assert time.monotonic() - start < 5
    stopper.join()


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("etag", '"../../../secret"'),  # the cache would point at a local file
        ("etag", '"../../made/here"'),  # a folder outside the cache
        ("etag", '"' + "a" * 300 + '"'),
        ("size", "-5"),
    ],
)
def test_hostile_etag_or_size_from_the_hub_never_becomes_a_path(hub, tiny, tmp_path, header, value):
    _serve_tiny(hub, tiny)
    secret = tmp_path / "secret"
    secret.write_text("private key")
    target = getattr(hub.state, header + "s")
    target[(REPO, "tokenizer_config.json")] = value
    before = sorted(p for p in tmp_path.rglob("*") if "hf-cache" not in p.parts)
    with pytest.raises(MmforgeError, match=r"invalid (ETag|size) for tokenizer_config\.json"):
        resolve(REPO, purpose="convert")
    assert sorted(p for p in tmp_path.rglob("*") if "hf-cache" not in p.parts) == before
    cached = [p for p in (tmp_path / "hf-cache").rglob("*") if p.is_file()]
    assert all(p.read_bytes() != b"private key" for p in cached)


def test_the_file_endpoint_honours_the_hub_deadline(hub, tiny, monkeypatch):
    import time

    _serve_tiny(hub, tiny)
    hub.state.hang_files = True  # the repo info answers; every file request hangs
    monkeypatch.setenv("MMFORGE_HUB_TIMEOUT", "1")
    start = time.monotonic()
    with pytest.raises(MmforgeError, match="did not answer within 1 s"):
        resolve(REPO)
    assert time.monotonic() - start < 4


def test_unknown_repo_and_revision(hub, tiny):
    _serve_tiny(hub, tiny)
    with pytest.raises(MmforgeError, match="not found on the hub"):
        resolve("tiny-org/nope")
    with pytest.raises(MmforgeError, match=r"Revision 'nope' does not exist"):
        resolve(f"{REPO}@nope")


def test_offline_reuses_the_cache(hub, tiny, monkeypatch):
    _serve_tiny(hub, tiny)
    first = resolve(REPO, purpose="convert")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    r = resolve(REPO, purpose="convert")
    assert r.offline and r.folder == first.folder
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve(REPO, purpose="convert").offline


def test_no_network_and_not_cached(hub, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(MmforgeError, match="Cannot reach the Hugging Face hub"):
        resolve("tiny-org/never-downloaded")
    # Offline by the user's own setting: that is said, not the network blamed.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MmforgeError) as e:
        resolve("tiny-org/never-downloaded")
    assert e.value.user_message.startswith("Offline mode is on (HF_HUB_OFFLINE is set)")
    assert "spelling" in (e.value.hint or "")


def test_pickled_weights_need_consent(hub, tiny):
    folder = tiny("qwen2_5_vl")
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.suffix != ".safetensors"}
    files["pytorch_model.bin"] = b"\x80\x04pickle"
    from tests.hubserver import Repo

    hub.state.repos["tiny-org/pickled"] = Repo(files=files)
    with pytest.raises(MmforgeError) as e:
        resolve("tiny-org/pickled", purpose="convert")
    assert "--allow-pickle" in e.value.one_line()
    r = resolve("tiny-org/pickled", purpose="convert", allow_pickle=True)
    assert (r.folder / "pytorch_model.bin").is_file()
    # inspect needs no weights, so pickled weights are no obstacle there.
    assert "pytorch_model.bin" not in resolve("tiny-org/pickled").files


def test_local_folder_checks(tmp_path):
    with pytest.raises(MmforgeError, match=r"has no config\.json"):
        resolve(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(MmforgeError, match="not valid JSON"):
        resolve(str(tmp_path))


def test_convert_refuses_a_checkpoint_it_cannot_convert_before_downloading_weights(
    hub, tiny, tmp_path
):
    from mmforge.backend.convert import convert

    folder = tmp_path / "mistral3"
    shutil.copytree(tiny("mistral3"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["projector_hidden_act"] = "silu"
    (folder / "config.json").write_text(json.dumps(config))
    hub.state.add_folder(REPO, folder)
    with pytest.raises(MmforgeError, match="projector_hidden_act = 'silu'"):
        convert(REPO, tmp_path / "out")
    fetched = {p.rsplit("/", 1)[-1] for m, p, _ in hub.state.requests if m == "GET"}
    assert "config.json" in fetched and "model.safetensors" not in fetched


def test_convert_fetches_the_lora_adapter_folders_beside_the_weights(hub, tmp_path):
    from mmforge.backend.families import lookup
    from mmforge.backend.tiny.release import write_release

    spec = next(r for r in lookup("phi4mm").fixtures.released if r.key == "phi4mm-native")
    folder = write_release(spec, tmp_path / "phi").folder
    repo = hub.state.add_folder(REPO, folder)
    repo.files["other-lora/adapter_model.safetensors"] = b"never fetched"
    resolved = resolve(REPO, purpose="convert")
    assert (resolved.folder / "config.json").is_file()  # the snapshot, not a subfolder
    for adapter in ("vision", "speech"):
        for file in ("adapter_config.json", "adapter_model.safetensors"):
            assert (resolved.folder / f"{adapter}-lora" / file).is_file()
    fetched = {p for m, p, _ in hub.state.requests if m == "GET"}
    assert not [p for p in fetched if "other-lora" in p]


def test_phi4_remote_layout_from_the_hub_inspects_on_metadata_and_converts(hub, tmp_path):
    """Before the weights are in, the layout's tower sizes fall back to the released ones
    (inspect, and convert's early check); the conversion then reads them from the weights."""
    from mmforge.backend.convert import convert
    from mmforge.backend.families import lookup
    from mmforge.backend.inspect import inspect_source
    from mmforge.backend.tiny.release import write_release

    spec = next(r for r in lookup("phi4mm").fixtures.released if r.key == "phi4mm-remote")
    hub.state.add_folder(REPO, write_release(spec, tmp_path / "phi").folder)
    profile = inspect_source(REPO)
    assert profile.family_key == "phi4mm" and not profile.remote_code
    assert any("read as data" in w for w in profile.warnings)
    manifest = convert(REPO, tmp_path / "out")
    assert any("vision LoRA (inline" in n for n in manifest.notes)
