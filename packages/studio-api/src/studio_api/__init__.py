"""The Studio host: settings, the FastAPI app and the lifespan that drives the scheduler.

```python
from studio_api import StudioSettings, create_app, run

settings = StudioSettings()          # reads LIONAGI_STUDIO_* / LIONAGI_SCHEDULER_* once
run(settings)                        # uvicorn on settings.host:settings.port
```
"""

from __future__ import annotations

from .__about__ import __version__
from ._app import create_app
from ._exceptions import SettingsError, StudioApiError
from ._server import run
from ._settings import StudioSettings

__all__ = ["SettingsError", "StudioApiError", "StudioSettings", "__version__", "create_app", "run"]
