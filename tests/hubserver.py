"""A loopback HTTP server that speaks the parts of the hub protocol huggingface_hub uses.

Endpoints: `GET /api/models/{repo}[/revision/{rev}]` (repo info with file sizes),
`HEAD`/`GET /{repo}/resolve/{rev}/{file}` (metadata headers, byte ranges) and the model
search `GET /api/models?search=&pipeline_tag=&sort=downloads&limit=&expand=` over
`HubState.listed` (as `HfApi.list_models` asks: `search` matches part of the id, case
ignored; most downloads first). Errors carry the
hub's `X-Error-Code` header so huggingface_hub raises its real exception types. A repo can
be gated (needs a bearer token), and a file can be cut mid-transfer to test resume.

Misbehaviours for the hardening tests: file requests redirected to another server (as the
hub sends them to its CDN), a repo whose commit sha is hostile, a metadata endpoint or a
file endpoint that accepts the connection and never answers, hostile ETag or size
headers for a file, a file body longer than announced or gzip-encoded against the
request, a captive portal's web page in place of the API, and a padded repository answer.

ETags are the hub's: the git blob sha-1 of a regular file, the sha-256 of an LFS one
(weights, and anything over 10 MB).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class Repo:
    files: dict[str, bytes]
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    gated_token: str | None = None  # when set, file downloads need this bearer token


@dataclass
class HubState:
    repos: dict[str, Repo] = field(default_factory=dict)
    # (repo, filename) -> bytes to send before dropping the connection, once per entry
    cut_after: dict[tuple[str, str], int] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, range
    authorization: list[tuple[str, str | None]] = field(default_factory=list)  # path, header
    redirect_files_to: str | None = None  # base URL that file requests are redirected to
    hang_api: bool = False  # the repo info endpoint never answers
    hang_files: bool = False  # the file endpoint (HEAD and GET) never answers
    # (repo, filename) -> the ETag (or linked size) header sent instead of the true one
    etags: dict[tuple[str, str], str] = field(default_factory=dict)
    sizes: dict[tuple[str, str], str] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=dict)  # token -> account name (whoami)
    # The model list the search endpoint serves: entries as the hub sends them ("id",
    # "downloads", "pipeline_tag", "tags", "config", "gated"), hostile ones included.
    listed: list[object] = field(default_factory=list)
    searches: list[dict[str, list[str]]] = field(default_factory=list)  # query parameters
    redirect_search_to: str | None = None  # base URL that searches are redirected to
    bytes_per_second: int | None = None  # file bodies are sent this slowly (None: at once)
    # (repo, filename) -> bytes sent after the file in a GET (Content-Length counts them)
    extra_bytes: dict[tuple[str, str], int] = field(default_factory=dict)
    # (repo, filename) -> a GET answers gzip-encoded zeros of this size instead of the file
    gzip_bombs: dict[tuple[str, str], int] = field(default_factory=dict)
    portal: bool = False  # every API answer is a captive portal's sign-in page
    info_padding: int = 0  # characters of filler added to each repository answer
    released: threading.Event = field(default_factory=threading.Event)  # ends a hang
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_folder(self, repo_id: str, folder: Path, **kwargs: object) -> Repo:
        files = {
            p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }
        repo = Repo(files=files, **kwargs)  # type: ignore[arg-type]
        self.repos[repo_id] = repo
        return repo


_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/?]+))?$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")


LFS_SUFFIXES = (".safetensors", ".bin", ".model")


def hub_etag(name: str, data: bytes) -> str:
    """The hub's ETag for a file: sha-256 for LFS files, the git blob sha-1 otherwise."""
    if name.endswith(LFS_SUFFIXES) or len(data) > 10 << 20:
        return '"' + hashlib.sha256(data).hexdigest() + '"'
    return '"' + hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() + '"'


class _Handler(BaseHTTPRequestHandler):
    state: HubState  # set on the subclass made per server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return None

    def _error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _repo(self, repo_id: str, rev: str | None) -> Repo | None:
        repo = self.state.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        if rev not in (None, "main", repo.sha):
            self._error(404, "RevisionNotFound", "Invalid rev id")
            return None
        return repo

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _serve(self, body: bool) -> None:
        path = unquote(urlparse(self.path).path)
        with self.state.lock:
            self.state.requests.append((self.command, path, self.headers.get("Range")))
            self.state.authorization.append((path, self.headers.get("Authorization")))
        if path == "/api/whoami-v2":
            auth = self.headers.get("Authorization") or ""
            name = self.state.users.get(auth.removeprefix("Bearer "))
            if name is None:
                self._error(401, "Unauthorized", "Invalid credentials")
                return
            self._json({"type": "user", "name": name}, body)
            return
        if path == "/api/models":
            self._search(body)
            return
        if self.state.portal:
            page = b"<!DOCTYPE html><html><body>Sign in to the Wi-Fi</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            if body:
                self.wfile.write(page)
            return
        if m := _API.match(path):
            if self.state.hang_api:
                self.state.released.wait(timeout=60)
                return
            repo = self._repo(m["repo"], m["rev"])
            if repo is None:
                return
            info = {
                "id": m["repo"],
                "modelId": m["repo"],
                "sha": repo.sha,
                "private": False,
                "gated": "manual" if repo.gated_token else False,
                "siblings": [
                    {"rfilename": n, "size": len(d), "blobId": hashlib.sha1(d).hexdigest()}
                    for n, d in repo.files.items()
                ],
            }
            if self.state.info_padding:
                info["cardData"] = {"padding": "x" * self.state.info_padding}
            self._json(info, body)
            return
        if m := _RESOLVE.match(path):
            if self.state.hang_files:
                self.state.released.wait(timeout=60)
                return
            repo = self._repo(m["repo"], m["rev"])
            if repo is None:
                return
            if (
                repo.gated_token
                and self.headers.get("Authorization") != f"Bearer {repo.gated_token}"
            ):
                self._error(401, "GatedRepo", "Access to this model is restricted")
                return
            data = repo.files.get(m["file"])
            if data is None:
                self._error(404, "EntryNotFound", "Entry not found")
                return
            key = (m["repo"], m["file"])
            etag = self.state.etags.get(key, hub_etag(m["file"], data))
            size = self.state.sizes.get(key, str(len(data)))
            if self.state.redirect_files_to:
                self._redirect(self.state.redirect_files_to + path, etag, size, repo.sha)
                return
            hostile = key in self.state.etags or key in self.state.sizes
            if hostile and urlparse(self.path).query != "served":  # headers as for LFS files
                # Another host name for this server, as the hub's CDN is another host.
                cdn = f"http://localhost:{self.server.server_address[1]}{path}?served"
                self._redirect(cdn, etag, size, repo.sha)
                return
            self._send_file(m["repo"], m["file"], data, repo.sha, body)
            return
        self._error(404, "RepoNotFound", "Not found")

    def _search(self, body: bool) -> None:
        params = parse_qs(urlparse(self.path).query)
        with self.state.lock:
            self.state.searches.append(params)
        if self.state.redirect_search_to:
            self.send_response(302)
            self.send_header("Location", self.state.redirect_search_to + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.state.hang_api:
            self.state.released.wait(timeout=60)
            return
        words = (params.get("search") or [""])[0].lower()
        tag = (params.get("pipeline_tag") or [None])[0]
        limit = int((params.get("limit") or ["1000"])[0])

        def keep(entry: object) -> bool:
            if not isinstance(entry, dict):
                return True  # hostile entries are sent to every search
            name = str(entry.get("id", "")).lower()
            return words in name and (tag is None or entry.get("pipeline_tag") == tag)

        found = [e for e in self.state.listed if keep(e)]

        def downloads(entry: object) -> int:
            count = entry.get("downloads") if isinstance(entry, dict) else 0
            return count if isinstance(count, int) else 0

        if (params.get("sort") or [""])[0] == "downloads":
            found.sort(key=downloads, reverse=True)
        self._json(found[:limit], body)

    def _json(self, value: object, body: bool) -> None:
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            try:
                self.wfile.write(data)
            except OSError:  # the client stopped reading (a bounded reader): as intended
                self.close_connection = True

    def _redirect(self, location: str, etag: str, size: str, sha: str) -> None:
        """The hub's answer for a file stored elsewhere: its metadata and where it is."""
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("X-Repo-Commit", sha)
        self.send_header("X-Linked-Etag", etag)
        self.send_header("X-Linked-Size", size)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send_file(self, repo_id: str, name: str, data: bytes, sha: str, body: bool) -> None:
        start, end = 0, len(data) - 1
        status = 200
        rng = self.headers.get("Range")
        if rng and (m := re.match(r"bytes=(\d+)-(\d*)", rng)):
            start = int(m[1])
            end = min(int(m[2]), len(data) - 1) if m[2] else len(data) - 1
            status = 206
        chunk = data[start : end + 1]
        key = (repo_id, name)
        extra = self.state.extra_bytes.get(key, 0) if body else 0
        if body and key in self.state.gzip_bombs:
            self._send_bomb(self.state.gzip_bombs[key], data, sha)
            return
        self.send_response(status)
        self.send_header("X-Repo-Commit", sha)
        self.send_header("ETag", hub_etag(name, data))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(chunk) + extra))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.end_headers()
        if not body:
            return
        with self.state.lock:
            cut = self.state.cut_after.pop((repo_id, name), None)
        if cut is not None:
            self.wfile.write(chunk[:cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        rate = self.state.bytes_per_second
        if rate is None:
            self.wfile.write(chunk)
            self._send_extra(extra)
            return
        step = max(1, rate // 20)
        for i in range(0, len(chunk), step):  # a slow link: twenty pieces a second
            self.wfile.write(chunk[i : i + step])
            self.wfile.flush()
            time.sleep(0.05)

    def _send_extra(self, extra: int) -> None:
        """`extra` zero bytes after the file, until the client stops reading."""
        block = b"\0" * (1 << 20)
        try:
            while extra > 0:
                self.wfile.write(block[: min(extra, len(block))])
                extra -= len(block)
        except OSError:  # the client hung up: what the test wants
            self.close_connection = True

    def _send_bomb(self, size: int, data: bytes, sha: str) -> None:
        """`size` zero bytes, gzip-encoded, as the body of the file."""
        packed = gzip.compress(b"\0" * size, compresslevel=9)
        self.send_response(200)
        self.send_header("X-Repo-Commit", sha)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(packed)))
        self.end_headers()
        try:
            self.wfile.write(packed)
        except OSError:
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """Quiet when a client hangs up mid-answer (a bounded reader does, on purpose)."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class HubServer:
    """Run the fake hub on 127.0.0.1 in a thread; use as a context manager."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.state = HubState()
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.httpd = _Server((host, 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.state.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
