"""What ``studio serve`` says while it starts: where to go once it is up, and, when it cannot
start, nothing but the one reason its caller prints.

:class:`StartupGate` holds the server's log records until startup ends. A server that started
releases them (in order) and :class:`BannerServer` adds one line naming the dashboard, the API
docs and the metrics at the address it bound. A server refused for an expected reason (another
engine holds the database, a schema too new, an unwritable path ...) drops them: ``run()``
raises that reason and the CLI prints it once, instead of uvicorn's ``ERROR:`` lines beside it.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

import uvicorn

logger = logging.getLogger("studio_api")

#: The ``filters`` entry of the log configuration the gate is installed under.
FILTER_NAME = "studio_startup"


class StartupGate(logging.Filter):
    """A handler filter that holds records until :meth:`release` or :meth:`discard`.

    A warning or worse that is not the startup failure itself releases everything at once, so
    a slow start that has something to say is not silent.
    """

    def __init__(self) -> None:
        super().__init__()
        self._held: list[logging.LogRecord] = []
        self._open = False
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            if self._open:
                return True
            if record.levelno < logging.WARNING or _startup_failure(record):
                self._held.append(record)
                return False
        self.release()
        return True

    def release(self) -> None:
        """Write the held records (through their loggers, in order) and hold no more."""
        with self._lock:
            if self._open:
                return
            self._open = True
            held, self._held = self._held, []
        for record in held:
            logging.getLogger(record.name).handle(record)

    def discard(self) -> None:
        """Drop the held records (the caller reports why startup failed) and hold no more."""
        with self._lock:
            self._open = True
            self._held = []


def _startup_failure(record: logging.LogRecord) -> bool:
    # uvicorn's two lines about a failed lifespan startup (the reason, then "Exiting").
    message = record.getMessage()
    return message.startswith(("studio cannot start:", "Application startup failed"))


def gated(config: dict[str, Any], gate: StartupGate) -> dict[str, Any]:
    """``config`` (a ``logging.config.dictConfig`` mapping) with ``gate`` on its default
    handler, the one uvicorn's and Studio's startup lines go through."""
    config.setdefault("filters", {})[FILTER_NAME] = {"()": lambda: gate}
    handler = config["handlers"]["default"]
    handler["filters"] = [*handler.get("filters", []), FILTER_NAME]
    return config


def banner(host: str, port: int) -> str:
    """The line naming the dashboard, the API docs and the metrics at ``host:port``."""
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"
    return f"Studio is up: dashboard {base}/ · API docs {base}/docs · metrics {base}/metrics"


class BannerServer(uvicorn.Server):
    """uvicorn's server that, once it listens, releases the gate and logs :func:`banner`."""

    def __init__(self, config: uvicorn.Config, gate: StartupGate) -> None:
        super().__init__(config)
        self.gate = gate

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.started:
            return
        self.gate.release()
        port = self.config.port
        for server in getattr(self, "servers", []):
            for listener in server.sockets or ():
                port = int(listener.getsockname()[1])  # the real port when asked for 0
                break
        logger.info("%s", banner(self.config.host, port))
