"""Which request paths belong to the dashboard (kept free of imports so ``_auth`` can use it)."""

from __future__ import annotations

#: Path prefixes the dashboard serves; each checks its own session cookie instead of a bearer
#: token. ``/`` (the overview) is matched exactly.
DASHBOARD_PREFIXES = (
    "/schedules",
    "/runs",
    "/dispatch",
    "/audit",
    "/login",
    "/logout",
    "/static/dashboard",
)


def is_dashboard_path(path: str) -> bool:
    """Whether ``path`` is a dashboard page, form action or asset."""
    if path == "/":
        return True
    return any(path == prefix or path.startswith(prefix + "/") for prefix in DASHBOARD_PREFIXES)
