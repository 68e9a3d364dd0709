"""Studio served in a thread of the test process: uvicorn, the real engine, a real database.

The server runs in a background thread with its own event loop; stopping it shuts it down the
way a signal would (the lifespan stops the engine) and waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from studio_state.testing import db_rows

from .._app import create_app
from .._connections import server_options
from .._setting_values import is_loopback_host
from .._settings import StudioSettings


class StudioServer:
    """A uvicorn server for one app in a background thread; ``start()`` / ``stop()``."""

    def __init__(
        self,
        settings: StudioSettings,
        *,
        app: FastAPI | None = None,
        log_level: str = "warning",
    ) -> None:
        if not is_loopback_host(settings.host):
            raise ValueError(f"test servers bind loopback only, not {settings.host!r}")
        self.settings = settings
        self.app = app if app is not None else create_app(settings)
        config = uvicorn.Config(
            self.app,
            host=settings.host,
            port=settings.port,
            lifespan="on",
            log_level=log_level,
            timeout_graceful_shutdown=5,
            **server_options(),
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="studio-test-server", daemon=True)
        self.base_url = ""

    def _run(self) -> None:
        # uvicorn exits when the lifespan fails; start() reports why
        with contextlib.suppress(SystemExit):
            self._server.run()

    def start(self, timeout: float = 30.0) -> str:
        """Start serving; return the base URL (``http://127.0.0.1:<port>``)."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                error = getattr(self.app.state, "startup_error", None)
                raise RuntimeError(f"studio test server failed to start: {error or 'see the log'}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"studio test server did not start within {timeout}s")
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.base_url = f"http://{self.settings.host}:{port}"
        return self.base_url

    def task_names(self, timeout: float = 5.0) -> list[str]:
        """What the asyncio tasks alive in the server's loop run now (coroutine names, sorted;
        the asking task left out), for leak checks."""

        async def names() -> list[str]:
            me = asyncio.current_task()
            return sorted(
                getattr(task.get_coro(), "__qualname__", task.get_name())
                for task in asyncio.all_tasks()
                if task is not me
            )

        loop = self._server.servers[0].sockets and self._server.servers[0].get_loop()
        if not loop:
            raise RuntimeError("the server is not serving")
        return asyncio.run_coroutine_threadsafe(names(), loop).result(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Shut down (lifespan teardown stops the engine) and wait for the thread."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"studio test server did not stop within {timeout}s")


@contextmanager
def serve_studio(settings: StudioSettings, *, app: FastAPI | None = None) -> Iterator[str]:
    """Serve ``settings`` (port 0 = a free port) for the block; yield the base URL."""
    server = StudioServer(settings, app=app)
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


class ServedStudio:
    """A started :class:`StudioServer` with an HTTP client and helpers to peek at its state.

    ``client`` is an ``httpx.Client`` on the server's base URL that sends the configured
    bearer token, if any.
    """

    def __init__(self, settings: StudioSettings, *, app: FastAPI | None = None) -> None:
        self.server = StudioServer(settings, app=app)
        self.settings = settings
        self.base_url = self.server.start()
        headers = {}
        if settings.auth_token is not None:
            headers["Authorization"] = f"Bearer {settings.auth_token.get_secret_value()}"
        self.client = httpx.Client(base_url=self.base_url, headers=headers, timeout=30)

    @property
    def engine(self) -> Any:
        """The app's running scheduler engine."""
        return self.server.app.state.engine

    def db_rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        """Read the database through a separate plain sqlite3 connection."""
        return db_rows(self.settings.db, sql, params)

    def stop(self) -> None:
        """Close the client and shut the server down."""
        self.client.close()
        self.server.stop()


class StudioServers:
    """Starts a :class:`ServedStudio` per call; as a context manager stops them all on exit.

    ``make_settings(**overrides)`` builds the settings of a call that passes none.
    """

    def __init__(self, make_settings: Callable[..., StudioSettings]) -> None:
        self._make_settings = make_settings
        self.started: list[ServedStudio] = []

    def __call__(self, settings: StudioSettings | None = None, **overrides: Any) -> ServedStudio:
        """Serve ``settings``, else ``make_settings(**overrides)``; return the started server."""
        if settings is None:
            settings = self._make_settings(**overrides)
        served = ServedStudio(settings)
        self.started.append(served)
        return served

    def stop_all(self) -> None:
        """Stop every server started here, the latest first."""
        while self.started:
            self.started.pop().stop()

    def __enter__(self) -> StudioServers:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop_all()
