"""The Studio host: settings, the FastAPI app and the lifespan that drives the scheduler.

```python
from studio_api import StudioSettings, create_app, run

settings = StudioSettings()          # reads LIONAGI_STUDIO_* / LIONAGI_SCHEDULER_* once
run(settings)                        # uvicorn on settings.host:settings.port
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .__about__ import __version__
from ._bounds import FIELD_LIMITS, check_field_limit
from ._exceptions import PortUnavailable, SettingsError, StudioApiError
from ._settings import StudioSettings

if TYPE_CHECKING:
    from ._app import create_app
    from ._server import run


def __getattr__(name: str) -> Any:
    # create_app and run pull in FastAPI and uvicorn; the CLI reads StudioSettings without them.
    if name == "create_app":
        from ._app import create_app

        return create_app
    if name == "run":
        from ._server import run

        return run
    raise AttributeError(f"module 'studio_api' has no attribute {name!r}")


__all__ = [
    "FIELD_LIMITS",
    "PortUnavailable",
    "SettingsError",
    "StudioApiError",
    "StudioSettings",
    "__version__",
    "check_field_limit",
    "create_app",
    "run",
]
