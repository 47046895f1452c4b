"""Finding a model: search the hub, mark each result with its family, suggest near names.

Everything the hub sends is written by strangers: repository ids, tags and configs are
checked (an id the hub itself would refuse is dropped), cut to size and counted (a bounded
number of results per query, one page each), and every request has the hub deadline
(MMFORGE_HUB_TIMEOUT) and honours Cancel. The GUI shows the results as plain text.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from mmforge.backend.errors import Cancelled, MmforgeError
from mmforge.backend.hubcall import hub_call, hub_timeout_s
from mmforge.backend.jobs import JobContext
from mmforge.backend.untrusted import parse_json

log = logging.getLogger(__name__)

# The hub's pipeline tags of the models mmforge is for: pictures and text in, text out;
# sound and text in; and models that take several kinds (Gemma 4, Qwen omni models).
PIPELINE_TAGS = ("image-text-to-text", "audio-text-to-text", "any-to-any")
# Per query (one page, never the hub's "next" links) and in all.
PER_TAG = 30
MAX_RESULTS = 50
MAX_QUERY = 96  # the hub's longest repository name
MAX_TAGS = 64  # tags read per result
MAX_TEXT = 96  # characters kept of a tag, a pipeline tag or a model_type
MAX_ANSWER = 8_000_000  # bytes read of one search answer
OFFLINE = (
    "The Hugging Face hub cannot be reached from this computer, so searching is not "
    "possible now. The known models below are listed with their sizes; one that was not "
    "downloaded before needs the hub too. The demo model needs no network."
)

Verdict = Literal["converts", "converts with consent", "not converted", "unknown"]


@dataclass(frozen=True)
class Mark:
    """What mmforge can do with a model, as far as the hub's metadata tells.

    Attributes:
        family: The family's name, or "" when unknown.
        verdict: "converts", "converts with consent" (named, with `reason`: what the
            user consents to), "not converted" (named, with `reason`) or "unknown" (until
            inspected).
        reason: Why a named family is not converted, or what converting asks of the user.
    """

    family: str = ""
    verdict: Verdict = "unknown"
    reason: str = ""

    def words(self) -> str:
        """The mark in words: "Qwen2.5-VL: converts"."""
        if self.verdict == "converts":
            return f"{self.family}: converts"
        if self.verdict == "converts with consent":
            return f"{self.family}: converts with your consent ({self.reason})"
        if self.verdict == "not converted":
            named = f"{self.family}: " if self.family else ""
            return f"{named}named but not converted ({self.reason})"
        return "unknown until inspected"


@dataclass(frozen=True)
class Found:
    """One search result.

    Attributes:
        repo_id: The hub id (checked).
        downloads: Downloads the hub counts (last 30 days).
        pipeline_tag: The hub's task tag, or "".
        gated: Whether the hub asks for terms to be accepted first.
        mark: Family and verdict.
    """

    repo_id: str
    downloads: int = 0
    pipeline_tag: str = ""
    gated: bool = False
    mark: Mark = field(default_factory=Mark)


@dataclass(frozen=True)
class SearchResult:
    """What a search found.

    Attributes:
        query: The text searched for.
        found: The results, most downloaded first.
        dropped: Results refused (an id the hub would not accept, a malformed entry).
    """

    query: str
    found: tuple[Found, ...] = ()
    dropped: int = 0


def valid_repo_id(text: str) -> bool:
    """Whether `text` is an `org/name` id the hub accepts (the intake's own check)."""
    from mmforge.backend.source import is_hub_id

    return len(text) <= 2 * MAX_QUERY and is_hub_id(text)


def _known_types() -> dict[str, Any]:
    from mmforge.backend.families import REGISTRY

    return REGISTRY.by_type  # the first entry owns a type


def mark_for(model_type: str | None, tags: tuple[str, ...] = ()) -> Mark:
    """The family mark from a config's model_type, else from the hub's tags.

    A type the registry names maps to its family; a text-only or speech-to-text type the
    registry knows by name is "not converted", saying why; anything else is "unknown".
    """
    from mmforge.backend.families import VariantRequest, lookup
    from mmforge.backend.families.catalog import CONSENT, EXACT, standing

    known = _known_types()
    family = known.get(model_type or "")
    if family is None:
        family = next((known[t] for t in tags if t in known), None)
    if family is not None:
        # An entry that shares its model_type with another (Pixtral-12B's `llava`) tells
        # them apart by the config; the listing holds only the type, which leaves the
        # entry's answer for a config that says no more (other llava: LLaVA).
        # No folder: a variant that reads the processor's files finds none (not the
        # current directory's), and answers for the class's defaults.
        request = VariantRequest({"model_type": model_type}, Path(os.devnull))
        family = family.recognition.variant(request) or family
        said = standing(family)  # the family table's words (docs/families.md)
        if said.kind == EXACT:
            return Mark(family.name, "converts")
        if said.kind == CONSENT and family.approximation is not None:
            why = f"an approximation: {family.approximation.short}"
            return Mark(family.name, "converts with consent", why)
        if said.kind == CONSENT:
            return Mark(family.name, "converts with consent", _first_sentence(said.why))
        return Mark(family.name, "not converted", _first_sentence(said.why))  # (or not yet)
    if model_type:
        try:
            lookup(model_type)
        except MmforgeError as e:
            if not e.user_message.startswith("Unknown model_type"):
                return Mark("", "not converted", _first_sentence(e.user_message))
    return Mark()


def _first_sentence(text: str) -> str:
    """The reason's first sentence, without long asides (the runtime's list of types)."""
    text = re.sub(r"\s\([^()]{40,}\)", "", " ".join(text.split()))
    cut = re.split(r"(?<=[.;:])\s", text, maxsplit=1)[0].rstrip(".;:")
    return cut if len(cut) <= 160 else cut[:157] + "…"


def _text(value: Any) -> str:
    return value[:MAX_TEXT] if isinstance(value, str) else ""


def parse_entry(item: Any) -> Found | None:
    """One entry of the hub's model list, checked; None for one to drop."""
    if not isinstance(item, dict):
        return None
    repo = item.get("id") or item.get("modelId")
    if not isinstance(repo, str) or not valid_repo_id(repo):
        return None
    raw_tags = item.get("tags")
    tags = tuple(_text(t) for t in (raw_tags if isinstance(raw_tags, list) else [])[:MAX_TAGS])
    config = item.get("config")
    model_type = _text(config.get("model_type")) if isinstance(config, dict) else ""
    downloads = item.get("downloads")
    return Found(
        repo_id=repo,
        downloads=downloads if isinstance(downloads, int) and downloads >= 0 else 0,
        pipeline_tag=_text(item.get("pipeline_tag")),
        gated=item.get("gated") in (True, "auto", "manual"),
        mark=mark_for(model_type or None, tags),
    )


def _offline_requested() -> bool:
    import os

    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def _query_page(query: str, tag: str, limit: int, token: str | None) -> list[Any]:
    """One page of the hub's model list, as `HfApi.list_models` asks for it.

    The request is list_models' own (`search`, `pipeline_tag`, `sort`, `limit`, `expand`)
    made once: list_models retries a refused connection five times with growing waits
    (about 23 s in huggingface_hub 2.4's http_backoff) and follows the answer's "next"
    link, which a search neither needs nor should trust.
    """
    from huggingface_hub import HfApi
    from huggingface_hub.utils import get_session

    from mmforge.backend.source import hub_endpoint

    api = HfApi(endpoint=hub_endpoint(), token=token)
    params: dict[str, Any] = {
        "pipeline_tag": tag,
        "sort": "downloads",
        "limit": limit,
        "expand": ["downloads", "pipeline_tag", "tags", "config", "gated"],
    }
    if query:
        params["search"] = query
    # Streamed and counted: a hostile or broken endpoint cannot make the app hold more
    # than MAX_ANSWER bytes. (A redirect elsewhere loses the token: httpx drops the
    # Authorization header when the host changes; tests/backend/test_hubsearch.py checks.)
    with get_session().stream(
        "GET",
        f"{api.endpoint}/api/models",
        params=params,
        headers=api._build_hf_headers(token=token),  # the token and user agent, as list_models
        timeout=hub_timeout_s() + 5,  # our deadline comes first
    ) as response:
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > MAX_ANSWER:
                raise MmforgeError("The hub's answer to a search is too large", "Try again later")
    if response.status_code >= 400:
        raise MmforgeError(
            "The hub answered the search with an error",
            "Try again later",
            details=f"HTTP {response.status_code}: {bytes(body[:2000]).decode(errors='replace')}",
        )
    try:
        data = parse_json(bytes(body), "the hub's search answer", limit=MAX_ANSWER)
    except MmforgeError:  # a portal's page, a broken mirror: no results
        data = None
    return data[:limit] if isinstance(data, list) else []


def search_models(
    query: str,
    ctx: JobContext | None = None,
    *,
    token: str | None = None,
    tags: tuple[str, ...] = PIPELINE_TAGS,
    per_tag: int = PER_TAG,
) -> SearchResult:
    """Search the hub's multimodal models for `query`, most downloaded first.

    Args:
        query: Words of the repository id ("qwen vl"); empty lists the most downloaded.
        ctx: Cancel (checked between requests and while one waits).
        token: A hub token; None uses the standard token store.
        tags: The hub pipeline tags searched, one request each.
        per_tag: The most results read per request.

    Raises:
        MmforgeError: The hub cannot be reached or refused (`OFFLINE` says so).
        Cancelled: The search was cancelled.
    """
    ctx = ctx or JobContext()
    query = " ".join(query.split())[:MAX_QUERY]
    if _offline_requested():
        raise MmforgeError(OFFLINE, details="HF_HUB_OFFLINE is set", kind="hub_offline")
    found: dict[str, Found] = {}
    dropped = 0
    for tag in tags:
        ctx.check_cancel()
        try:
            items = hub_call(
                f"search for {query!r}", partial(_query_page, query, tag, per_tag, token), ctx
            )
        except (Cancelled, MmforgeError):  # a timeout included: it says the hub did not answer
            raise
        except Exception as e:
            raise _search_error(e) from e
        for item in items:
            entry = parse_entry(item)
            if entry is None:
                dropped += 1
            elif entry.repo_id not in found:
                found[entry.repo_id] = entry
    ranked = sorted(found.values(), key=lambda f: (-f.downloads, f.repo_id.lower()))
    return SearchResult(query=query, found=tuple(ranked[:MAX_RESULTS]), dropped=dropped)


def _search_error(e: BaseException) -> MmforgeError:
    from mmforge.backend.source import _is_connection_error

    if _is_connection_error(e):
        return MmforgeError(OFFLINE, details=f"{type(e).__name__}: {e}", kind="hub_offline")
    raise e


def suggestions(repo_id: str, ctx: JobContext | None = None, n: int = 5) -> list[Found]:
    """Hub models whose ids are close to `repo_id` (a typo's "did you mean"), closest first.

    Searches the hub for the name part and, when that finds nothing, for its first word;
    the known-good models count as candidates too.

    Raises:
        MmforgeError: The hub cannot be reached.
        Cancelled: Cancelled.
    """
    from mmforge.backend.known_models import known_models

    name = repo_id.split("@", 1)[0].rsplit("/", 1)[-1]
    candidates = {
        m.repo_id: Found(m.repo_id, mark=Mark(m.family, "converts")) for m in known_models()
    }
    result = search_models(name, ctx)
    if not result.found:
        first = re.split(r"[-_.\s]", name, maxsplit=1)[0]
        if first and first != name:
            result = search_models(first, ctx)
    candidates |= {f.repo_id: f for f in result.found}
    return [candidates[c] for c in close_matches(repo_id, set(candidates), n)]


def close_matches(repo_id: str, candidates: set[str], n: int = 5) -> list[str]:
    """The candidates closest to `repo_id` (case ignored), closest first."""
    wanted = repo_id.split("@", 1)[0]
    by_lower = {c.lower(): c for c in candidates if c != wanted}
    close = difflib.get_close_matches(wanted.lower(), list(by_lower), n=n, cutoff=0.6)
    name = wanted.rsplit("/", 1)[-1].lower()
    names = {c.rsplit("/", 1)[-1]: c for c in by_lower}
    close += [
        names[m]
        for m in difflib.get_close_matches(name, list(names), n=n, cutoff=0.75)
        if names[m] not in close
    ]
    return [by_lower[c] for c in close[:n]]
