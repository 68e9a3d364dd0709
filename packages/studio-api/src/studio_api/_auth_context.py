"""Who the current request acts as, shared by the auth middleware, the dashboard and routes.

The dashboard's requests to the API are made in process (``_dashboard/_internal``); they carry
the visitor's :class:`Principal` in the ASGI scope under :data:`CLAIM_SCOPE_KEY`, which no
client can set (a server builds the scope of a network request itself).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from starlette.requests import Request

from ._tokens._roles import Principal, Role, role_allows

#: The scope key of an in-process request's principal (the dashboard's).
CLAIM_SCOPE_KEY = "studio.principal"
#: ``request.state`` attribute holding the principal of an API request.
STATE_KEY = "principal"
#: The principal of a Studio that enforces no authentication.
OPEN = Principal("api", "admin")


@dataclass(frozen=True, slots=True)
class DashboardAuth:
    """Whether logging in is required now and who the dashboard's visitor is (``None``: no
    live session)."""

    enforced: bool
    principal: Principal | None


DASHBOARD_AUTH: ContextVar[DashboardAuth | None] = ContextVar("studio_dashboard_auth", default=None)


def dashboard_principal() -> Principal | None:
    """The dashboard visitor of the current request (``None`` outside the dashboard or when
    not logged in)."""
    auth = DASHBOARD_AUTH.get()
    return auth.principal if auth is not None else None


def principal_of(request: Request) -> Principal:
    """Who an API request acts as (the middleware put it on ``request.state``)."""
    principal = getattr(request.state, STATE_KEY, None)
    return principal if isinstance(principal, Principal) else OPEN


def actor_of(request: Request) -> str:
    """The actor name an API request's audit rows carry (its token's name)."""
    return principal_of(request).name


def may(role: Role) -> bool:
    """Whether the dashboard's visitor holds ``role`` (or more)."""
    principal = dashboard_principal()
    return principal is not None and role_allows(principal.role, role)
