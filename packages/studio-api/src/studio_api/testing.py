"""Test support: serve a real Studio (uvicorn, real engine, real database) on loopback.

```python
from studio_api import StudioSettings
from studio_api.testing import serve_studio

with serve_studio(StudioSettings(db=tmp_path / "state.db", port=0, tick_seconds=1)) as url:
    httpx.get(f"{url}/api/health")
```

The server runs in a background thread with its own event loop; leaving the block shuts it
down the way a signal would (the lifespan stops the engine) and waits for it.

For pytest fixtures, :class:`ServedStudio` is a started server with an ``httpx`` client that
carries the configured bearer token, and :class:`StudioServers` starts them on demand and
stops them all at teardown::

    @pytest.fixture
    def serve() -> Iterator[StudioServers]:
        with StudioServers(lambda **kw: StudioSettings.from_env({}, **kw)) as servers:
            yield servers
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from studio_state.testing import db_rows, free_port, wait_for

from ._app import create_app
from ._connections import server_options
from ._setting_values import is_loopback_host
from ._settings import StudioSettings

__all__ = [
    "RoundRobin",
    "ServeProcess",
    "ServedStudio",
    "StudioServer",
    "StudioServers",
    "serve_studio",
]


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


class ServeProcess:
    """A real ``studio serve`` process (``python -m studio_cli serve``) of this environment:
    one node of a cluster on the database URL ``db``, with ``home`` as its ``HOME`` and its
    run-log directory under it; started and serving when the constructor returns. The one way
    the test suites start a served node.

    ``node_url``: ``True`` advertises its own address as ``LIONAGI_STUDIO_NODE_URL``,
    ``False`` none, a string that URL (one nothing answers on, say). ``env`` adds or
    overrides variables (e.g. ``LIONAGI_SCHEDULER_COMMAND_ALLOWLIST``).
    """

    def __init__(
        self,
        name: str,
        db: str,
        home: Path,
        *,
        node_url: str | bool = True,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.runs = home / "runs"
        home.mkdir(parents=True, exist_ok=True)
        advertised = self.url if node_url is True else (node_url or "")
        variables = {
            **os.environ,
            "HOME": str(home),
            "LIONAGI_STUDIO_NODE_ID": name,
            "LIONAGI_STUDIO_TICK_SECONDS": "0.5",
            "LIONAGI_STUDIO_RUN_LOG_DIR": str(self.runs),
            "LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": "sh,sleep,true",
            **({"LIONAGI_STUDIO_NODE_URL": advertised} if advertised else {}),
            **(env or {}),
        }
        if not advertised:
            variables.pop("LIONAGI_STUDIO_NODE_URL", None)
        self.log = home / f"{name}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "studio_cli", "serve", "--port", str(self.port), "--db", db],
                env=variables,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(lambda: self.proc.poll() is not None or self.health() is not None, timeout)
        if self.proc.poll() is not None:
            raise RuntimeError(f"studio serve {name} exited: {self.log.read_text()[-2000:]}")

    def health(self) -> dict[str, Any] | None:
        """``GET /api/health``, or ``None`` while it does not answer."""
        try:
            answer = httpx.get(f"{self.url}/api/health", timeout=5)
        except httpx.HTTPError:
            return None
        return dict(answer.json()) if answer.status_code == 200 else None

    def get(self, path: str, **params: Any) -> Any:
        """``GET path`` (query ``params``): the JSON answer; an error status raises
        ``httpx.HTTPStatusError``."""
        answer = httpx.get(f"{self.url}{path}", params=params, timeout=30)
        answer.raise_for_status()
        return answer.json()

    def post(self, path: str, body: Any = None) -> Any:
        """``POST path`` with the JSON ``body``: the JSON answer; an error status raises
        ``httpx.HTTPStatusError``."""
        answer = httpx.post(f"{self.url}{path}", json=body, timeout=30)
        answer.raise_for_status()
        return answer.json()

    def kill(self) -> None:
        """``kill -9`` of its process group (the node and the children it runs), waited for."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL of its process group if it has not exited within 30 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


class RoundRobin:
    """An HTTP client that sends each request to the next of several base URLs in turn (a
    load balancer's simplest policy); ``last`` is the URL the latest request went to."""

    def __init__(self, urls: list[str], *, headers: dict[str, str] | None = None) -> None:
        if not urls:
            raise ValueError("RoundRobin needs at least one URL")
        self.urls = list(urls)
        self.last = ""
        self._turn = 0
        self._client = httpx.Client(headers=headers or {}, timeout=30)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """``method path`` on the next URL."""
        self.last = self.urls[self._turn % len(self.urls)]
        self._turn += 1
        return self._client.request(method, self.last + path, **kwargs)

    def close(self) -> None:
        """Close the underlying client."""
        self._client.close()
