"""Test support: serve a real Studio (uvicorn, real engine, real database) on loopback.

```python
from studio_api import StudioSettings
from studio_api.testing import serve_studio

with serve_studio(StudioSettings(db=tmp_path / "state.db", port=0, tick_seconds=1)) as url:
    httpx.get(f"{url}/api/health")
```

The server runs in a background thread with its own event loop; leaving the block shuts it
down the way a signal would (the lifespan stops the engine) and waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from ._app import create_app
from ._connections import server_options
from ._setting_values import is_loopback_host
from ._settings import StudioSettings

__all__ = ["StudioServer", "serve_studio"]


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
