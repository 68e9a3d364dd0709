"""Connections a client cannot hoard: a header timeout, a connection cap, the nofile limit.

uvicorn's HTTP/1.1 protocol (h11) starts no timer until a first response is sent, so a client
that connects and never sends its request line holds a file descriptor forever; a thousand of
them exhaust the process's descriptors (accept() then fails in a loop, and so does every
child a schedule starts). :func:`guarded_h11_protocol` closes a connection whose request
headers are not complete within ``header_timeout`` seconds, and keeps at most
``max_connections`` open: past the cap the oldest connection with no request in progress
is closed (so a new client, health checks included, still gets in), and when every connection
has a request in progress the new one is closed at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger("studio_api")

#: Seconds a connection may take to send its request line and headers.
HEADER_TIMEOUT_SECONDS = 10.0
#: Seconds an idle kept-alive connection stays open after a response.
KEEP_ALIVE_SECONDS = 5
#: Largest request head (request line + headers) accepted, in bytes.
MAX_HEAD_BYTES = 64 * 1024
#: Descriptors kept free for the database, children's pipes and log files.
RESERVED_DESCRIPTORS = 256
#: The listen backlog, which is also how many connections asyncio accepts in one go before
#: any of them is seen (and possibly closed) by the protocol: the cap leaves room for it.
ACCEPT_BATCH = 128
#: The connection cap when the descriptor limit allows more.
MAX_CONNECTIONS = 4096
_CAP_LOG_EVERY_SECONDS = 60.0


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; return the (soft, hard) now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def connection_cap() -> int:
    """The connection cap the current descriptor limit leaves room for (at least 16)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(16, min(MAX_CONNECTIONS, soft - RESERVED_DESCRIPTORS - ACCEPT_BATCH))


def guarded_h11_protocol(
    *, max_connections: int, header_timeout: float = HEADER_TIMEOUT_SECONDS
) -> type[H11Protocol]:
    """An h11 protocol class with a header timeout and a connection cap (see the module)."""
    last_cap_log = [0.0]

    class GuardedH11Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.opened_at = time.monotonic()
            self._head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections and not self._evict_idle():
                self._drop()
                return
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            if self._head_timer is None and self.conn.their_state is h11.IDLE:
                self._arm_head_timer()  # a kept-alive connection starts its next request
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._cancel_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

        # -- helpers ----------------------------------------------------------------------
        def idle(self) -> bool:
            """No request in progress: waiting for (the rest of) a request head."""
            return self.conn.their_state is h11.IDLE and (
                self.cycle is None or self.cycle.response_complete
            )

        def _arm_head_timer(self) -> None:
            self._cancel_head_timer()
            self._head_timer = self.loop.call_later(header_timeout, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.idle() and not self.transport.is_closing():
                self._drop()

        def _drop(self) -> None:
            self._cancel_head_timer()
            self.connections.discard(self)
            self.transport.abort()

        def _evict_idle(self) -> bool:
            idle = [
                c
                for c in self.connections
                if c is not self and isinstance(c, GuardedH11Protocol) and c.idle()
            ]
            now = time.monotonic()
            if now - last_cap_log[0] > _CAP_LOG_EVERY_SECONDS:
                last_cap_log[0] = now
                logger.warning(
                    "studio: %d connections open (the cap): closing idle ones for new clients",
                    len(self.connections),
                )
            if not idle:
                return False
            min(idle, key=lambda c: c.opened_at)._drop()
            return True

    return GuardedH11Protocol


class AcceptErrorFilter(logging.Filter):
    """At most one "socket.accept() out of system resource" record a minute, without its
    traceback: when descriptors run out for another reason, asyncio retries accept() every
    tenth of a second and would log a traceback each time."""

    def __init__(self, every: float = _CAP_LOG_EVERY_SECONDS) -> None:
        super().__init__()
        self.every = every
        self._last = -every

    def filter(self, record: logging.LogRecord) -> bool:
        if "accept" not in str(record.msg):
            return True
        now = time.monotonic()
        if now - self._last < self.every:
            return False
        self._last = now
        record.exc_info = None
        record.exc_text = None
        return True


def install_accept_error_filter() -> None:
    """Add :class:`AcceptErrorFilter` to the ``asyncio`` logger (once)."""
    target = logging.getLogger("asyncio")
    if not any(isinstance(f, AcceptErrorFilter) for f in target.filters):
        target.addFilter(AcceptErrorFilter())


def server_options(max_connections: int | None = None) -> dict[str, Any]:
    """The ``uvicorn.Config`` keyword arguments of a guarded server."""
    cap = connection_cap() if max_connections is None else max_connections
    return {
        "http": guarded_h11_protocol(max_connections=cap),
        "timeout_keep_alive": KEEP_ALIVE_SECONDS,
        "h11_max_incomplete_event_size": MAX_HEAD_BYTES,
        "limit_concurrency": cap * 2,
        "backlog": min(ACCEPT_BATCH, cap),
    }
