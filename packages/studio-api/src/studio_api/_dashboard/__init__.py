"""The web dashboard: server-rendered pages over the API (templates and assets ship here)."""

from __future__ import annotations

from fastapi import FastAPI

from ._paths import is_dashboard_path
from ._session import SessionSigner


def install_dashboard(app: FastAPI) -> None:
    """Serve the dashboard from ``app`` (whose ``state.settings`` holds the auth token)."""
    from . import _actions, _audit, _edit, _forms, _pages

    settings = app.state.settings
    token = settings.auth_token.get_secret_value() if settings.auth_token is not None else None
    app.state.dashboard_signer = SessionSigner(token)
    app.state.dashboard_zones = None
    app.include_router(_pages.router)
    app.include_router(_audit.router)
    # before the generic ``/schedules/{id}/{verb}`` actions: delete has its own confirm step
    app.include_router(_forms.router)
    app.include_router(_edit.router)
    app.include_router(_actions.router)


__all__ = ["SessionSigner", "install_dashboard", "is_dashboard_path"]
