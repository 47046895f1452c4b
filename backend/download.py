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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from mmforge.backend.errors import MmforgeError
from mmforge.backend.hubcall import HubTimeout, hub_call, hub_timeout_s

log = logging.getLogger(__name__)

CHUNK = 1 << 20
PROGRESS_CHUNK = 1 << 18  # progress moves every 256 KiB: smooth on a slow link too
RETRIES = 5
MAX_REDIRECTS = 10
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# What the hub names that becomes a path in the cache: a commit, a branch or tag, a file.
COMMIT = re.compile(r"^[0-9a-f]{40}$")
_REVISION_PART = re.compile(r"^[\w-][\w.-]*$")
# A top-level file of the repository, or one in a top-level folder (a LoRA adapter's);
# a folder name has no dot, so it is never "." or "..".
_SAFE_NAME = re.compile(r"^(?:[\w-]+/)?[\w.-]+$")
# The blob's name: the hub sends a git sha-1 or an LFS sha-256; a mirror may send another
# opaque token, but never a dot or a slash (it would name a path out of `blobs/`).
_ETAG = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
# A blob being downloaded: `blobs/<etag>` + this, renamed to the blob when complete.
PARTIAL = ".mmforge-partial"


def check_revision(revision: str) -> None:
    """Refuse a branch, tag or commit name that could leave the cache as a path.

    Raises:
        MmforgeError: A part is empty, '.', '..' or holds other than letters, digits, '_',
            '-' and '.'.
    """
    parts = revision.split("/")
    if not all(_REVISION_PART.match(p) for p in parts):
        raise MmforgeError(
            f"'{revision}' is not a valid revision",
            "After '@' give a branch, tag or commit (letters, digits, '-', '_', '.' and '/'; "
            "no '..')",
        )


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
    max_size: int | None = None,
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
        max_size: The most bytes such a file may have (a config, a tokenizer): a larger
            announced size is refused before anything is fetched. None: no bound.
    """
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    # Everything below becomes a path in the cache: checked here too, whoever calls.
    if not COMMIT.match(commit):
        raise MmforgeError(f"Not a commit id: {commit!r}", "Try again later")
    if revision:
        check_revision(revision)
    if not _SAFE_NAME.match(filename) or {".", ".."} & set(filename.split("/")):
        raise MmforgeError(f"Not a file name mmforge fetches: {filename!r}", "Try again later")
    root = repo_folder(cache_dir, repo_id)
    pointer = root / "snapshots" / commit / filename
    if pointer.exists():
        on_bytes(pointer.stat().st_size)
        return pointer
    url = hf_hub_url(repo_id, filename, revision=commit, endpoint=endpoint)
    meta = hub_call(
        f"metadata of {filename}",
        lambda: get_hf_file_metadata(
            url, token=token, endpoint=endpoint, timeout=hub_timeout_s() + 5
        ),  # the deadline is hub_call's: it comes first
    )
    etag = _checked_etag(meta.etag, filename)
    _check_size(meta.size, filename)
    if max_size is not None and meta.size is not None and meta.size > max_size:
        raise MmforgeError(
            f"The hub says {filename} is {meta.size:,} bytes, more than the {max_size:,} "
            "mmforge accepts of such a file",
            "The repository is malformed or hostile; check HF_ENDPOINT and the model id",
        )
    blob = root / "blobs" / etag
    if not blob.exists():
        blob.parent.mkdir(parents=True, exist_ok=True)
        partial = blob.with_name(etag + PARTIAL)
        assert meta.size is not None  # _check_size refused a file of unknown size
        _download(meta.location, partial, meta.size, token, endpoint, on_bytes, filename)
        check_etag(partial, etag, filename)
        _fsync(partial)
        os.replace(partial, blob)
    else:
        on_bytes(blob.stat().st_size)
    _link(blob, pointer)
    if revision and revision != commit:
        ref = root / "refs" / revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit, encoding="utf-8")
    return pointer


def _checked_etag(header: str | None, filename: str) -> str:
    """The blob name from the hub's ETag, refused unless it is one safe path component.

    Raises:
        MmforgeError: No ETag, or one holding anything but letters, digits, '_' and '-'.
    """
    etag = (header or "").removeprefix("W/").strip('"')
    if not _ETAG.match(etag):
        raise MmforgeError(
            f"The hub sent an invalid ETag for {filename}",
            "Check HF_ENDPOINT (a mirror may be misbehaving) and try again later",
            details=f"ETag: {header!r}"[:300],
        )
    return etag


def _check_size(size: object, filename: str) -> None:
    """Refuse a file size from the hub that is not a whole number of bytes.

    The announced size bounds the body: a hub (or a proxy) sending more is cut off there.

    Raises:
        MmforgeError: No size, a negative or a non-integer one.
    """
    if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
        return
    if size is None:  # the body would have no bound: refused as the hub never does this
        raise MmforgeError(
            f"The hub did not say how large {filename} is",
            "Check HF_ENDPOINT (a mirror or proxy may be misbehaving) and try again later",
        )
    raise MmforgeError(
        f"The hub sent an invalid size for {filename}",
        "Check HF_ENDPOINT (a mirror may be misbehaving) and try again later",
        details=f"size: {size!r}"[:300],
    )


def same_origin(url: str, endpoint: str) -> bool:
    """Whether `url` is on the hub endpoint itself (scheme, host and port)."""
    a, b = urlsplit(url), urlsplit(endpoint)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)


@contextmanager
def _get(url: str, headers: dict[str, str], endpoint: str) -> Iterator[Any]:
    """A streamed GET that follows redirects itself, sending the token to the hub only.

    The file's location is usually another host (the hub redirects to its CDN, a mirror
    anywhere): the Authorization header goes to the hub endpoint and nowhere else.
    """
    from huggingface_hub.utils import get_session

    anonymous = {k: v for k, v in headers.items() if k.lower() != "authorization"}
    for _ in range(MAX_REDIRECTS):
        sent = headers if same_origin(url, endpoint) else anonymous
        with get_session().stream(
            "GET", url, headers=sent, follow_redirects=False, timeout=hub_timeout_s()
        ) as response:
            if not response.has_redirect_location:
                yield response
                return
            url = urljoin(url, response.headers["Location"])
    raise MmforgeError(
        f"The hub redirected the download more than {MAX_REDIRECTS} times",
        "Try again later; check HF_ENDPOINT or the proxy",
    )


def _download(
    url: str,
    partial: Path,
    size: int,
    token: str | None,
    endpoint: str,
    on_bytes: Callable[[int], None],
    filename: str,
) -> None:
    """Fetch `url` into `partial` (continuing what it holds) up to `size` bytes.

    The body is read no further than `size`: more (a hostile or broken hub, a proxy, a
    Content-Encoding that decodes to gigabytes) deletes the partial file and is refused.

    Raises:
        MmforgeError: The body is longer or shorter than announced, or the connection
            broke `RETRIES` times without progress.
        HubTimeout: Nothing came within the deadline.
    """
    import httpx2
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

    have = partial.stat().st_size if partial.exists() else 0
    if have > size:
        partial.unlink()
        have = 0
    partial.touch()  # an empty file is fetched by no request, and is still checked
    if have:
        log.info("resuming %s at byte %d", partial.name, have)
        on_bytes(have)
    attempts = 0
    while have < size:
        headers = build_hf_headers(token=token)
        headers["Accept-Encoding"] = "identity"  # the bytes of the file, nothing to inflate
        if have:
            headers["Range"] = f"bytes={have}-"
        before = have
        try:
            with _get(url, headers, endpoint) as response:
                hf_raise_for_status(response)
                mode = "ab"
                if have and response.status_code == 200:  # the server ignored the range
                    on_bytes(-have)
                    have, mode = 0, "wb"
                with partial.open(mode) as f:
                    for chunk in response.iter_bytes(PROGRESS_CHUNK):
                        if have + len(chunk) > size:
                            f.close()
                            _too_long(partial, filename, size)
                        f.write(chunk)
                        have += len(chunk)
                        on_bytes(len(chunk))
        except httpx2.TimeoutException as e:
            if have == before:  # nothing came within the deadline: the hub is not answering
                raise HubTimeout(
                    f"The hub did not answer within {hub_timeout_s():.0f} s (file download)",
                    "Check the network connection (or HF_ENDPOINT / a proxy) and run the same "
                    "command again: the download resumes where it stopped",
                ) from e
            log.warning("download stalled (%s); resuming at byte %d", e, have)
        except (httpx2.TransportError, ConnectionError) as e:
            attempts = 0 if have > before else attempts + 1
            if attempts >= RETRIES:
                raise MmforgeError(
                    f"The connection to the hub broke while fetching {partial.name}",
                    "Run the same command again: the download resumes where it stopped",
                    details=str(e),
                ) from e
            log.warning("download interrupted (%s); resuming at byte %d", e, have)
    if have != size:
        raise MmforgeError(
            f"Downloaded {have} bytes where the hub announced {size}",
            "Run the same command again to download the file afresh",
        )


def _too_long(partial: Path, filename: str, size: int) -> None:
    partial.unlink(missing_ok=True)
    raise MmforgeError(
        f"The hub sent more of {filename} than the {size:,} bytes it announced; the partial "
        "download was deleted",
        "Check HF_ENDPOINT (a mirror or proxy may be misbehaving) and try again later",
    )


def check_etag(path: Path, etag: str, filename: str) -> None:
    r"""Check a downloaded file against the hub's ETag; a mismatch deletes it.

    The hub names an LFS file by its sha-256 and a regular one (a config, a chat
    template) by its git blob sha-1, `sha1(b"blob <size>\0" + data)` (a mirror may use
    the plain sha-1: either is accepted). Both are checked, after a fresh download and
    after a resumed one alike: a resume continues a partial file that another server, or
    another version of the file, may have started. Another kind of ETag (a mirror's
    opaque token) cannot be checked and is logged.

    Raises:
        MmforgeError: The content does not match the ETag (the file was deleted).
    """
    if _SHA256.match(etag):
        digests = [hashlib.sha256()]
    elif COMMIT.match(etag):  # 40 hex digits: a git object id
        digests = [hashlib.sha1(usedforsecurity=False), hashlib.sha1(usedforsecurity=False)]
        digests[0].update(b"blob %d\0" % path.stat().st_size)
    else:
        log.warning("cannot check %s: its ETag %r is no checksum", filename, etag)
        return
    with path.open("rb") as f:
        while block := f.read(8 * CHUNK):
            for digest in digests:
                digest.update(block)
    if all(digest.hexdigest() != etag for digest in digests):
        path.unlink()
        raise MmforgeError(
            f"{filename} arrived corrupted: its content does not match the hub's checksum, so "
            "the partial download was deleted",
            "Run the same command again to download it afresh",
        )


def _fsync(path: Path) -> None:
    """Flush a finished download to the disk before it is renamed into place."""
    with path.open("r+b") as f:  # writable: Windows flushes only a handle opened to write
        os.fsync(f.fileno())


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
