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

A server the test can crash runs in a process of its own: :class:`ServeProcess` (``kill -9``,
restart, descriptor limits, a cluster node on a database URL with :meth:`ServeProcess.node`).
"""

from __future__ import annotations

from ._process import ServeProcess, isolated_env
from ._round_robin import RoundRobin
from ._threaded import ServedStudio, StudioServer, StudioServers, serve_studio

__all__ = [
    "RoundRobin",
    "ServeProcess",
    "ServedStudio",
    "StudioServer",
    "StudioServers",
    "isolated_env",
    "serve_studio",
]
