"""Connections that cannot hold the server: a deadline for headers, and room for new clients.

uvicorn 0.55's h11 protocol waits for a request's headers for as long as the socket stays
open, and counts every open connection against `limit_concurrency`: 24 sockets that sent
half their headers turned every other client away (503) for as long as they were held.
The protocol class here (given to uvicorn as `http=`) changes three things:

- A connection whose request headers are not complete within `header_timeout_s`, from
  its opening or from the end of its previous answer, is closed. (A body's own time
  limit is the app's: it answers 408.)
- At most `max_connections` are open. One more makes room by closing the oldest that is
  not being answered: waiting for its headers, idle between requests, or still sending a
  body. Whoever holds sockets open cannot lock the next client out, and the connections
  whose requests are with the model are never the ones closed.
- A body answered before it arrived (413 from its declared length) is read and dropped,
  so the client sees the answer rather than a reset, but at most `drain_bytes`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """How long and how many.

    Attributes:
        header_timeout_s: Seconds a request's headers may take to arrive.
        max_connections: Connections open at once.
        drain_bytes: Bytes of an answered request's body read and dropped at most.
    """

    header_timeout_s: float = 10.0
    max_connections: int = 32
    drain_bytes: int = 256 << 20


def protocol_class(limits: Limits) -> type[asyncio.Protocol]:
    """The h11 protocol under these limits, for `uvicorn.Config(http=...)`."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and a connection limit that evicts."""

    limits: ClassVar[Limits] = Limits()

    def connection_made(self, transport: Any) -> None:  # noqa: D102 - asyncio.Protocol
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._since = self.loop.time()
        self._drained = 0
        self._arm()
        self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:  # noqa: D102
        if self._draining():
            self._drained += len(data)
            if self._drained > self.limits.drain_bytes:
                self.transport.close()
                return
        super().data_received(data)

    def on_response_complete(self) -> None:  # noqa: D102 - called by uvicorn's cycle
        super().on_response_complete()
        if not self._answering():  # a pipelined request may be under way already
            self._since = self.loop.time()
            self._drained = 0
            self._arm()

    # -- the rules ----------------------------------------------------------------------

    def _answering(self) -> bool:
        """Whether a request's headers came and its answer is not complete."""
        cycle = self.cycle
        return cycle is not None and not cycle.response_complete

    def _draining(self) -> bool:
        """Whether the answer went out before the request's body ended."""
        cycle = self.cycle
        return (
            cycle is not None and cycle.response_complete and self.conn.their_state is h11.SEND_BODY
        )

    def _evictable(self) -> bool:
        cycle = self.cycle
        return cycle is None or cycle.response_complete or cycle.more_body

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.limits.header_timeout_s, self._late)

    def _late(self) -> None:
        self._deadline = None
        if not self._answering() and not self.transport.is_closing():
            log.debug("closing a connection whose request did not come in time: %s", self.client)
            self.transport.close()

    def _make_room(self) -> None:
        """Close the oldest connections not being answered, past `max_connections`."""
        open_ = [
            c
            for c in self.connections
            if isinstance(c, GuardedH11Protocol) and not c.transport.is_closing()
        ]
        excess = len(open_) - self.limits.max_connections
        if excess <= 0:
            return
        # Waiting or idle ones first, then those still sending a body; the oldest first.
        victims = sorted(
            (c for c in open_ if c._evictable()), key=lambda c: (c._answering(), c._since)
        )
        for victim in victims[:excess]:
            log.info("too many connections: closing one opened %.1f s ago", self._age(victim))
            victim.transport.close()

    def _age(self, other: GuardedH11Protocol) -> float:
        return self.loop.time() - other._since
