"""The ASGI server (uvicorn) around the app, started and stopped cleanly.

uvicorn runs on its own thread with its own event loop, on a socket bound here first (so
a port in use is a clear error before anything starts, and port 0 gives a free port whose
number is known at once). `ServerHandle.stop` closes the engine (waiting requests get 503,
the running answer stops at its next token, the chat worker ends), then asks uvicorn to
exit and joins it.

It binds to the loopback address unless told otherwise; another address is refused
without an API key, since anyone on that network could then use the model. Web pages are
kept out by the Host and Origin checks (`guard`), slow and half-open connections by the
protocol's limits (`connections`).

The key is best read from a file (`read_key_file`) or the environment: a command line is
readable by every local user (/proc/PID/cmdline).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.serve import DEFAULT_PORT, LOOPBACK
from mmforge.backend.serve.app import Settings, build_app
from mmforge.backend.serve.engine import Counts, Engine
from mmforge.backend.serve.guard import allowed_hosts, normalize_origin

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
MAX_KEY_FILE_BYTES = 4096
MAX_BODY_MB = 4096


@dataclass(frozen=True)
class ServeOptions:
    """How to serve.

    Attributes:
        host: The address to listen on (loopback unless the user names another).
        port: The port; 0 picks a free one.
        api_key: The key clients must send as `Authorization: Bearer KEY` (None: none).
        allow_fetch: Fetch pictures given as http(s) URLs from public addresses (all of a
            request's together bounded by `max_body_bytes`).
        max_body_bytes: The largest request body (413 past it).
        max_queue: Requests that may wait for the model (429 past it).
        allow_origins: Web pages (origins, `guard.normalize_origin`) that may use the
            server; requests from any other page are refused.
        header_timeout_s: Seconds a request's headers may take (the connection closes).
        body_timeout_s: Seconds a request's body may take (408).
        max_connections: Connections open at once (past it the oldest idle one closes).
    """

    host: str = LOOPBACK
    port: int = DEFAULT_PORT
    api_key: str | None = None
    allow_fetch: bool = False
    max_body_bytes: int = 32 << 20
    max_queue: int = 8
    allow_origins: tuple[str, ...] = ()
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int = 32


def is_loopback(host: str) -> bool:
    """Whether only this computer can reach an address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_options(options: ServeOptions) -> None:
    """Refuse settings that cannot work or would expose the model; `MmforgeError`."""
    if not is_loopback(options.host) and not options.api_key:
        raise MmforgeError(
            f"Serving on {options.host} lets other computers use the model, so it needs a key",
            "Pass --api-key-file FILE or set MMFORGE_API_KEY (clients send it as their API "
            f"key), or leave --host at {LOOPBACK}",
        )
    if not 0 <= options.port <= 65535:
        raise MmforgeError(f"Port {options.port} is out of range", "Pick a port from 1 to 65535")
    if options.max_queue < 0 or options.max_body_bytes < 1024:
        raise MmforgeError(
            "The queue must be 0 or more and the body limit at least 1 KiB", "Fix the limits"
        )
    timeouts = (options.header_timeout_s, options.body_timeout_s)
    if not all(math.isfinite(t) and t > 0 for t in timeouts) or options.max_connections < 1:
        raise MmforgeError(
            "The timeouts must be positive and at least one connection allowed", "Fix the limits"
        )
    for origin in options.allow_origins:
        if normalize_origin(origin) != origin:
            raise MmforgeError(f"--allow-origin {origin!r} is not written as browsers send it")
    check_key(options.api_key, "The API key")


def check_key(key: str | None, where: str) -> None:
    """Refuse a key no client could send in a header (control characters, outer spaces)."""
    if key is None:
        return
    if not key.strip():
        raise MmforgeError(f"{where} is empty", "Give a key of at least one character")
    if key != key.strip() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        raise MmforgeError(
            f"{where} holds spaces around it or control characters, which no client can send",
            "Use a key of letters, digits and punctuation",
        )


def read_key_file(path: Path) -> str:
    """The API key in a file (its text, without the spaces and line break around it).

    Raises:
        MmforgeError: The file cannot be read, is not a small text file, or holds no key.
    """
    import stat

    where = f"The key file {path}"
    try:
        # Without blocking: a FIFO in the key's place would wait for a writer forever.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise MmforgeError(f"{where} is not a regular file", "Name a text file")
            data = f.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as e:
        raise MmforgeError(
            f"Cannot read the key file {path} ({e.strerror or e})", "Check --api-key-file"
        ) from None
    if len(data) > MAX_KEY_FILE_BYTES:
        raise MmforgeError(f"{where} is over {MAX_KEY_FILE_BYTES} bytes", "Name the key's file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise MmforgeError(f"{where} is not UTF-8 text", "Save the key as text") from None
    key = text.strip()  # the line break an editor or `echo` adds
    check_key(key, where)
    return key


def _bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise MmforgeError(
            f"Cannot resolve the host {host!r} ({e})", "Pass an IP address"
        ) from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise MmforgeError(
            f"Cannot listen on {host}:{port} ({e.strerror or e})",
            "Pick another --port, or stop the program that uses it",
        ) from None
    return sock


class ServerHandle:
    """A running server; `stop` (or leaving the `with` block) shuts it down."""

    def __init__(self, server: Any, thread: threading.Thread, sock: socket.socket, engine: Engine):
        self._server = server
        self._thread = thread
        self._sock = sock
        self.engine = engine
        host, port = sock.getsockname()[:2]
        self.host = str(host)
        self.port = int(port)
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{shown}:{self.port}/v1"

    @property
    def model_id(self) -> str:
        """The model name clients pass."""
        return self.engine.model_id

    @property
    def counts(self) -> Counts:
        """The request counts now."""
        return self.engine.counts

    @property
    def running(self) -> bool:
        """Whether the HTTP server thread is alive."""
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop answering, close every connection and join the threads (idempotent)."""
        self.engine.close()
        self._server.should_exit = True
        self._thread.join()
        self._sock.close()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(
    package: Path,
    options: ServeOptions,
    ep: str = "cpu",
    on_change: Callable[[Counts], None] | None = None,
    on_stopped: Callable[[str], None] | None = None,
) -> ServerHandle:
    """Load the package in a chat worker and serve it; returns once connections are taken.

    `on_change` hears the request counts after each change, `on_stopped` why the model's
    worker died, if it does (both from any thread).

    Raises:
        MmforgeError: The settings are refused, the port is taken, or the package does
            not load.
    """
    import uvicorn

    from mmforge.backend.chat.client import ChatClient
    from mmforge.backend.chat.values import PackageInfo
    from mmforge.backend.serve.connections import Limits, protocol_class

    check_options(options)
    context = PackageInfo.read(package).context_length  # a folder that is no package: said now
    sock = _bind(options.host, options.port)
    try:
        client = ChatClient(package, ep, save=False)
    except BaseException:
        sock.close()
        raise
    engine = Engine(
        client,
        context,
        options.max_queue,
        on_change,
        on_stopped=on_stopped,
    )
    settings = Settings(
        api_key=options.api_key,
        allow_fetch=options.allow_fetch,
        max_body_bytes=options.max_body_bytes,
        body_timeout_s=options.body_timeout_s,
        hosts=allowed_hosts(str(sock.getsockname()[0])),
        origins=options.allow_origins,
    )
    limits = Limits(
        header_timeout_s=options.header_timeout_s,
        max_connections=options.max_connections,
        drain_bytes=8 * options.max_body_bytes,
    )
    config = uvicorn.Config(
        build_app(engine, settings),
        # uvicorn's h11 protocol with a header deadline and a connection limit that makes
        # room (`connections`); memory stays bounded by the connections and the queue.
        http=protocol_class(limits),
        loop="asyncio",
        ws="none",
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=3,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="mmforge-serve-http"
    )
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            engine.close()
            server.should_exit = True
            thread.join()
            sock.close()
            raise MmforgeError("The server did not start", "Run with -v to see why")
        time.sleep(0.01)
    handle = ServerHandle(server, thread, sock, engine)
    log.info("serving %s at %s", handle.model_id, handle.url)
    return handle
