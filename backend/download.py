"""Fetching one hub file into the standard Hugging Face cache, resumable across runs.

huggingface_hub 2.x downloads into a process-unique temporary file and deletes it on any
failure, so a cancelled or crashed 10 GB download starts again from zero. Here the partial
blob keeps a stable name (`blobs/<etag>.mmforge-partial`); the next run continues it with a
range request. The finished file lands in the cache exactly where huggingface_hub puts it
(`blobs/<etag>`, a `snapshots/<commit>/<name>` link and `refs/<revision>`), so
transformers and huggingface_hub find it as cached.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

from mmforge.backend.errors import MmforgeError

log = logging.getLogger(__name__)

CHUNK = 1 << 20
RETRIES = 5
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def default_cache() -> Path:
    """huggingface_hub's default cache folder."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def repo_folder(cache_dir: Path, repo_id: str) -> Path:
    """The cache folder of a model repository."""
    return cache_dir / ("models--" + repo_id.replace("/", "--"))


def fetch_file(
    *,
    endpoint: str,
    repo_id: str,
    commit: str,
    revision: str | None,
    filename: str,
    token: str | None,
    cache_dir: Path,
    on_bytes: Callable[[int], None],
) -> Path:
    """Make one repository file available in the cache and return its snapshot path.

    Args:
        endpoint: Hub endpoint.
        repo_id: Repository id.
        commit: The commit the file is taken from.
        revision: The branch or tag the user asked for, recorded in `refs/`.
        filename: Path of the file in the repository.
        token: Hub token (None: the standard token store).
        cache_dir: The hub cache folder.
        on_bytes: Called with the number of bytes newly on disk, after each write. It may
            raise to stop; what was written stays and the next run resumes from it.
    """
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    root = repo_folder(cache_dir, repo_id)
    pointer = root / "snapshots" / commit / filename
    if pointer.exists():
        on_bytes(pointer.stat().st_size)
        return pointer
    url = hf_hub_url(repo_id, filename, revision=commit, endpoint=endpoint)
    meta = get_hf_file_metadata(url, token=token, endpoint=endpoint)
    etag = (meta.etag or "").removeprefix("W/").strip('"')
    if not etag:
        raise MmforgeError(f"The hub sent no ETag for {filename}", "Try again later")
    blob = root / "blobs" / etag
    if not blob.exists():
        blob.parent.mkdir(parents=True, exist_ok=True)
        partial = blob.with_name(etag + ".mmforge-partial")
        _download(meta.location, partial, meta.size, token, on_bytes)
        if _SHA256.match(etag):
            _check_sha256(partial, etag, filename)
        os.replace(partial, blob)
    else:
        on_bytes(blob.stat().st_size)
    _link(blob, pointer)
    if revision and revision != commit:
        ref = root / "refs" / revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit, encoding="utf-8")
    return pointer


def _download(
    url: str, partial: Path, size: int | None, token: str | None, on_bytes: Callable[[int], None]
) -> None:
    import httpx2
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    have = partial.stat().st_size if partial.exists() else 0
    if size is not None and have > size:
        partial.unlink()
        have = 0
    if have:
        log.info("resuming %s at byte %d", partial.name, have)
        on_bytes(have)
    attempts = 0
    while size is None or have < size:
        headers = build_hf_headers(token=token)
        if have:
            headers["Range"] = f"bytes={have}-"
        before = have
        try:
            with get_session().stream(
                "GET", url, headers=headers, follow_redirects=True, timeout=30
            ) as response:
                hf_raise_for_status(response)
                mode = "ab"
                if have and response.status_code == 200:  # the server ignored the range
                    on_bytes(-have)
                    have, mode = 0, "wb"
                with partial.open(mode) as f:
                    for chunk in response.iter_bytes(CHUNK):
                        f.write(chunk)
                        have += len(chunk)
                        on_bytes(len(chunk))
            if size is None:
                break
        except (httpx2.TransportError, ConnectionError) as e:
            attempts = 0 if have > before else attempts + 1
            if attempts >= RETRIES:
                raise MmforgeError(
                    f"The connection to the hub broke while fetching {partial.name}",
                    "Run the same command again: the download resumes where it stopped",
                    details=str(e),
                ) from e
            log.warning("download interrupted (%s); resuming at byte %d", e, have)
    if size is not None and have != size:
        raise MmforgeError(
            f"Downloaded {have} bytes where the hub announced {size}",
            "Run the same command again to download the file afresh",
        )


def _check_sha256(path: Path, expected: str, filename: str) -> None:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(8 * CHUNK):
            digest.update(block)
    if digest.hexdigest() != expected:
        path.unlink()
        raise MmforgeError(
            f"{filename} arrived corrupted (checksum mismatch)",
            "Run the same command again to download it afresh",
        )


def _link(blob: Path, pointer: Path) -> None:
    """Point the snapshot entry at the blob, as huggingface_hub does (copy if no symlinks)."""
    pointer.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(blob, pointer.parent)
    tmp = pointer.with_name(pointer.name + ".mmforge-link")
    tmp.unlink(missing_ok=True)
    try:
        os.symlink(target, tmp)
    except OSError:
        import shutil

        shutil.copyfile(blob, tmp)
    os.replace(tmp, pointer)
