"""Resolve a SOURCE (a local folder or a hub id) to a folder of checkpoint files.

Downloads go through huggingface_hub into the standard cache, so the files are shared with
transformers and resumed after an interruption. Only the files that the stage needs are
fetched: small metadata files for `inspect`, the weights too for conversion.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mmforge.backend.download import COMMIT, check_revision
from mmforge.backend.errors import PICKLE, Cancelled, MmforgeError
from mmforge.backend.hubcall import HubTimeout, get_json, hub_call
from mmforge.backend.jobs import JobContext
from mmforge.backend.localfiles import check_local_files
from mmforge.backend.untrusted import CONFIG_LIMIT, TOKENIZER_LIMIT, read_json_object

log = logging.getLogger(__name__)

Purpose = Literal["inspect", "convert"]

# Files worth having for any stage: small, and every later stage reads some of them.
METADATA_PATTERNS = (
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.json",
    "chat_template.jinja",
    "model.safetensors.index.json",
)
SAFETENSORS_PATTERNS = ("*.safetensors",)
# LoRA adapters shipped beside the base model as PEFT folders (Phi-4-multimodal's vision
# and speech adapters): exact names, the only files below the top level ever fetched.
ADAPTER_FILES = tuple(
    f"{adapter}-lora/{file}"
    for adapter in ("vision", "speech")
    for file in ("adapter_config.json", "adapter_model.safetensors")
)
PICKLE_PATTERNS = ("pytorch_model*.bin", "pytorch_model.bin.index.json")

_HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[\w./-]+))?$")


@dataclass(frozen=True)
class Source:
    """A parsed SOURCE argument.

    Attributes:
        spec: The text the user gave.
        local_path: The folder, for a local source.
        repo_id: The hub repository, for a hub source.
        revision: Branch, tag or commit for a hub source (None means the default branch).
    """

    spec: str
    local_path: Path | None = None
    repo_id: str | None = None
    revision: str | None = None


@dataclass(frozen=True)
class ResolvedSource:
    """A source whose files are on disk.

    Attributes:
        source: What the user asked for.
        folder: The folder holding `config.json` and the other fetched files.
        commit: The hub commit the files come from (None for a local folder).
        offline: True when the hub could not be reached and the cache was used.
        files: Names of the files fetched (hub) or found (local), relative to `folder`.
        config: config.json as parsed while checking a local folder (None for the hub),
            so that the checkpoint is not parsed again (`Checkpoint.read`).
    """

    source: Source
    folder: Path
    commit: str | None = None
    offline: bool = False
    files: tuple[str, ...] = ()
    config: dict[str, Any] | None = None


def parse_source(spec: str) -> Source:
    """Tell a local folder from a hub id `org/name[@revision]`.

    A path that exists on disk wins over a hub id of the same spelling.

    Raises:
        MmforgeError: The text is neither an existing folder nor a hub id.
    """
    text = spec.strip()
    if not text:
        raise MmforgeError("No model source given", "Pass a local folder or a hub id like org/name")
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise MmforgeError(
                f"{text} is a file, not a model folder",
                "Pass the folder that holds config.json",
            )
        return Source(spec=text, local_path=path.resolve())
    head = text.split("@", 1)[0]  # a revision may hold '/' (refs/pr/1)
    looks_like_path = head.startswith(("/", ".", "~")) or "\\" in head or head.count("/") > 1
    match = _HUB_ID.match(text)
    if looks_like_path or not match:
        raise MmforgeError(
            f"No such folder: {text}",
            "Pass an existing model folder or a hub id like org/name[@revision]",
        )
    repo, revision = match.group("repo"), match.group("rev")
    _check_repo_id(text, repo)
    if revision is not None:
        check_revision(revision)
    return Source(spec=text, repo_id=repo, revision=revision)


def is_hub_id(text: str) -> bool:
    """Whether `text` is a hub id `org/name[@revision]` that the hub would accept."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    match = _HUB_ID.match(text)
    if match is None:
        return False
    try:
        validate_repo_id(match.group("repo"))
        if match.group("rev") is not None:
            check_revision(match.group("rev"))
    except (HFValidationError, MmforgeError):
        return False
    return True


def _check_repo_id(text: str, repo: str) -> None:
    """Refuse what the hub would refuse as an id (huggingface_hub's own rules)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError as e:
        raise MmforgeError(
            f"No such folder, and '{repo}' is not a valid hub id",
            "Pass an existing model folder, or a hub id like org/name[@revision] (letters, "
            "digits, '-', '_' and '.'; no '--' or '..')",
            details=str(e),
        ) from None


def read_json(path: Path, what: str) -> dict[str, Any]:
    """Read a JSON object file from a checkpoint, within `untrusted`'s bounds.

    A tokenizer.json may be larger than a config (`TOKENIZER_LIMIT`).

    Raises:
        MmforgeError: Naming the file (and the field) for every failure.
    """
    limit = TOKENIZER_LIMIT if path.name == "tokenizer.json" else CONFIG_LIMIT
    return read_json_object(path, what, limit=limit)


def check_model_folder(folder: Path) -> dict[str, Any]:
    """`folder`'s config.json, parsed; a clear error unless it holds a readable one."""
    config = folder / "config.json"
    if not config.is_file():
        raise MmforgeError(
            f"{folder} has no config.json, so it is not a Hugging Face model folder",
            "Pass the folder that holds config.json (for a hub model, its snapshot folder)",
        )
    return read_json(config, "model")


def hub_endpoint() -> str:
    """The hub endpoint, read at call time so that HF_ENDPOINT set later still counts."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def hub_cache_dir() -> Path | None:
    """The hub cache folder from HF_HUB_CACHE or HF_HOME, read at call time.

    huggingface_hub reads these once at import; reading them here keeps a later change
    (a test, a GUI setting) effective. None means the library's default.
    """
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return None


def _offline_requested() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def _is_metadata(name: str) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in METADATA_PATTERNS)


def wanted_files(names: list[str], purpose: Purpose, allow_pickle: bool) -> list[str]:
    """Pick the repository files a stage needs.

    Raises:
        MmforgeError: Conversion was asked for a repo with only pickled weights and the
            user did not allow them, or with no weights at all.
    """
    top = [n for n in names if "/" not in n]

    def matching(patterns: tuple[str, ...]) -> list[str]:
        return [n for n in top if any(fnmatch.fnmatch(n, p) for p in patterns)]

    chosen = matching(METADATA_PATTERNS)
    if purpose == "convert":
        weights = matching(SAFETENSORS_PATTERNS)
        if not weights:
            pickled = matching(PICKLE_PATTERNS)
            if pickled and not allow_pickle:
                raise MmforgeError(
                    "This model has only pickled .bin weights, which can run code when loaded",
                    "If you trust it, pass --allow-pickle (loaded with weights_only=True)",
                    kind=PICKLE,
                )
            if not pickled:
                raise MmforgeError(
                    "This repository has no model weights (*.safetensors)",
                    "Check that the id names a model repository",
                )
            weights = pickled
        chosen += weights
    chosen += [
        n for n in names if n in ADAPTER_FILES and (purpose == "convert" or n.endswith(".json"))
    ]
    return sorted(set(chosen))


class _Tally:
    """Bytes and files done across one download, reported through the job context."""

    def __init__(self, ctx: JobContext, total_bytes: int, total_files: int) -> None:
        self.ctx = ctx
        self.total_bytes = total_bytes
        self.total_files = total_files
        self.done_bytes = 0
        self.done_files = 0
        self.current = ""

    def add(self, n: int) -> None:
        self.done_bytes += n
        self.ctx.report(
            "download",
            self.done_bytes,
            self.total_bytes or None,
            unit="bytes",
            message=f"{self.current} ({self.done_files}/{self.total_files} files)",
        )


def resolve(
    spec: str,
    ctx: JobContext | None = None,
    *,
    purpose: Purpose = "inspect",
    token: str | None = None,
    allow_pickle: bool = False,
    cache_dir: Path | None = None,
    vet: Callable[[Path], None] | None = None,
) -> ResolvedSource:
    """Make the files of a source available on disk.

    Args:
        spec: A local folder or a hub id `org/name[@revision]`.
        ctx: Progress and cancel; download progress is reported in bytes.
        purpose: "inspect" fetches metadata only; "convert" fetches the weights too.
        token: A hub token; None uses the standard Hugging Face token store.
        allow_pickle: Accept pickled `.bin` weights when a repo has no safetensors.
        cache_dir: Hub cache folder; None uses the standard cache.
        vet: Called with the folder once a hub repository's metadata (config, tokenizer,
            processor files) is in, before any weights are downloaded; it raises to stop
            (a model that cannot be converted costs no download).

    Raises:
        MmforgeError: With what to do next, for every failure the user can act on.
        Cancelled: The job was cancelled; partial files stay in the cache and resume.
    """
    ctx = ctx or JobContext()
    source = parse_source(spec)
    cache_dir = cache_dir or hub_cache_dir()
    if source.local_path is not None:
        check_local_files(source.local_path, {name.split("/")[0] for name in ADAPTER_FILES})
        config = check_model_folder(source.local_path)
        files = tuple(sorted(p.name for p in source.local_path.iterdir() if p.is_file()))
        return ResolvedSource(source=source, folder=source.local_path, files=files, config=config)
    return _resolve_hub(source, ctx, purpose, token, allow_pickle, cache_dir, vet)


def _resolve_hub(
    source: Source,
    ctx: JobContext,
    purpose: Purpose,
    token: str | None,
    allow_pickle: bool,
    cache_dir: Path | None,
    vet: Callable[[Path], None] | None = None,
) -> ResolvedSource:
    from huggingface_hub import HfApi

    assert source.repo_id is not None
    api = HfApi(endpoint=hub_endpoint(), token=token)
    if _offline_requested():
        return _from_cache(source, purpose, allow_pickle, cache_dir, reason="HF_HUB_OFFLINE is set")
    ctx.report("download", 0, None, unit="bytes", message="asking the hub", force=True)
    try:
        info = _repo_info(api, source, ctx)
    except HubTimeout as e:
        try:  # a copy in the cache still serves
            return _from_cache(source, purpose, allow_pickle, cache_dir, reason=e.user_message)
        except MmforgeError:
            raise e from None
    except (MmforgeError, Cancelled):
        raise
    except Exception as e:
        if _is_connection_error(e):
            return _from_cache(source, purpose, allow_pickle, cache_dir, reason=str(e))
        raise _hub_error(source, e) from e
    siblings = {s.rfilename: (s.size or 0) for s in (info.siblings or [])}
    names = wanted_files(list(siblings), purpose, allow_pickle)
    if "config.json" not in names:
        raise MmforgeError(
            f"{source.repo_id} has no config.json at its top level",
            "Is it a transformers model repository?",
        )
    tally = _Tally(ctx, sum(siblings[n] for n in names), len(names))
    folder: Path | None = None
    metadata = [n for n in names if _is_metadata(n) or n.endswith(".json")]
    for name in [*metadata, *(n for n in names if n not in metadata)]:
        if vet is not None and folder is not None and not _is_metadata(name):
            vet(folder)
            vet = None
        ctx.check_cancel()
        tally.current = name
        path = _download_one(api, source, info.sha, name, token, cache_dir, tally)
        tally.done_files += 1
        folder = path.parents[name.count("/")]
    ctx.report(
        "download",
        tally.done_bytes,
        tally.done_bytes,
        unit="bytes",
        force=True,
        message=f"{len(names)} files ready",
    )
    assert folder is not None
    return ResolvedSource(source=source, folder=folder, commit=info.sha, files=tuple(names))


def _repo_info(api: Any, source: Source, ctx: JobContext) -> Any:
    """The repository's files and commit, within the hub deadline; the commit checked.

    Raises:
        MmforgeError: The commit is not a 40-digit hex id (it becomes a folder of the cache:
            a hub or mirror that sends anything else is refused before it names a path).
    """
    info = hub_call("repository information", lambda: _model_info(api, source), ctx)
    if not isinstance(info.sha, str) or not COMMIT.match(info.sha):
        raise MmforgeError(
            f"The hub did not give a valid commit id for {source.repo_id}",
            "Check HF_ENDPOINT (a mirror may be misbehaving) and try again later",
            details=f"commit: {info.sha!r}",
        )
    return info


def _model_info(api: Any, source: Source) -> Any:
    """`HfApi.model_info(files_metadata=True)`, read through the bounded `get_json`.

    huggingface_hub reads the whole answer into memory and parses it unbounded (a 300 MB
    answer held 956 MB); a web page in its place (a captive portal) raised a bare
    JSONDecodeError.

    Raises:
        MmforgeError: The answer is too large, not JSON, or not shaped like model info.
    """
    from urllib.parse import quote

    from huggingface_hub.hf_api import ModelInfo

    url = f"{api.endpoint}/api/models/{source.repo_id}"
    if source.revision is not None:
        url += f"/revision/{quote(source.revision, safe='')}"
    what = "repository information"
    data = get_json(url, what, headers=api._build_hf_headers(), params={"blobs": True})
    try:
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        info = ModelInfo(**data)
        for sibling in info.siblings or []:
            if not isinstance(sibling.rfilename, str) or not isinstance(sibling.size, int | None):
                raise TypeError(f"a file entry {sibling.rfilename!r} is malformed")
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise MmforgeError(
            f"The hub's {what} for {source.repo_id} is malformed ({e})"[:300],
            "Check HF_ENDPOINT (a mirror may be misbehaving) and try again later",
        ) from None
    return info


def _download_one(
    api: Any,
    source: Source,
    commit: str,
    name: str,
    token: str | None,
    cache_dir: Path | None,
    tally: _Tally,
) -> Path:
    from mmforge.backend.download import default_cache, fetch_file

    try:
        return fetch_file(
            endpoint=api.endpoint,
            repo_id=source.repo_id or "",
            commit=commit,
            revision=source.revision or "main",
            filename=name,
            token=token,
            cache_dir=cache_dir or default_cache(),
            on_bytes=tally.add,
            # The readers bound each file again (untrusted.py); here nothing larger than
            # the largest of them is even fetched.
            max_size=TOKENIZER_LIMIT if _is_metadata(name) else None,
        )
    except (Cancelled, MmforgeError):
        raise
    except Exception as e:
        if _is_connection_error(e):
            raise MmforgeError(
                f"The connection to the hub broke while fetching {name}",
                "Run the same command again: the download resumes where it stopped",
                details=str(e),
            ) from e
        raise _hub_error(source, e) from e


def _from_cache(
    source: Source,
    purpose: Purpose,
    allow_pickle: bool,
    cache_dir: Path | None,
    reason: str,
) -> ResolvedSource:
    """Use the files already in the cache when the hub cannot be reached."""
    from huggingface_hub import snapshot_download

    assert source.repo_id is not None
    try:
        folder = Path(
            snapshot_download(
                source.repo_id,
                revision=source.revision,
                cache_dir=cache_dir,
                local_files_only=True,
            )
        )
    except Exception as e:
        if _offline_requested():  # the user's own setting, not the network
            raise MmforgeError(
                f"Offline mode is on (HF_HUB_OFFLINE is set) and {source.repo_id} is not in "
                "the local cache",
                "Check the name's spelling, unset HF_HUB_OFFLINE to download it, or use a "
                "local folder",
                details=reason,
            ) from e
        raise MmforgeError(
            f"Cannot reach the Hugging Face hub and {source.repo_id} is not in the local cache",
            "Check the network connection (or HF_ENDPOINT / a proxy), or use a local folder",
            details=reason,
        ) from e
    present = [p.name for p in folder.iterdir() if p.is_file()]
    names = wanted_files(present, purpose, allow_pickle)
    if purpose == "convert":
        _check_cached_shards(folder)
    log.info("hub unreachable (%s); using cached files of %s", reason, source.repo_id)
    return ResolvedSource(source=source, folder=folder, offline=True, files=tuple(names))


def _check_cached_shards(folder: Path) -> None:
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return
    weight_map = read_json(index, "model").get("weight_map", {})
    missing = sorted({f for f in weight_map.values() if not (folder / f).is_file()})
    if missing:
        raise MmforgeError(
            f"The cached copy is incomplete: {', '.join(missing[:3])} missing",
            "Connect to the network once so the download can finish",
        )


def _is_connection_error(e: BaseException) -> bool:
    import httpx2  # huggingface_hub's HTTP client
    from huggingface_hub.errors import OfflineModeIsEnabled

    return isinstance(e, httpx2.TransportError | OfflineModeIsEnabled | ConnectionError)


def _hub_error(source: Source, e: BaseException) -> MmforgeError:
    """Turn a huggingface_hub error into a message saying what to do.

    Raises:
        BaseException: `e` itself when it is not a hub or disk error.
    """
    from huggingface_hub import errors as hf

    repo = source.repo_id
    if isinstance(e, hf.GatedRepoError):
        return MmforgeError(
            f"{repo} is gated: the hub refused access",
            "Accept its terms on the model's hub page, then save a token with `hf auth login` "
            "(or the GUI's token button)",
            details=str(e),
            kind="hub_auth",
        )
    if isinstance(e, hf.RevisionNotFoundError):
        return MmforgeError(
            f"Revision '{source.revision}' does not exist in {repo}",
            "Check the branch, tag or commit after '@'",
            details=str(e),
        )
    if isinstance(e, hf.RepositoryNotFoundError):
        where = f"There is no folder {repo} here, and {repo}" if "@" not in source.spec else repo
        return MmforgeError(
            f"{where} was not found on the hub, or it is private",
            "Check the spelling; for a private repo save a token with `hf auth login`",
            details=str(e),
            kind="hub_not_found",
        )
    if isinstance(e, hf.EntryNotFoundError):
        return MmforgeError(
            f"A file listed by {repo} is missing on the hub",
            "The repository may be changing: try again later",
            details=str(e),
        )
    if isinstance(e, hf.HfHubHTTPError):
        return MmforgeError(
            f"The hub answered with an error for {repo}",
            "Try again later; run with -v to see the hub's answer",
            details=str(e),
        )
    if isinstance(e, OSError):
        return MmforgeError(
            f"Could not write the download of {repo}: {e.strerror or e}",
            "Check the free disk space and permissions of the Hugging Face cache",
        )
    # Anything else is a bug, not a user error: let it surface as one (the CLI logs the
    # traceback and prints one line).
    raise e
