"""Which role each route needs: the one table the auth middleware enforces and
``docs/operations.md`` shows (:func:`roles_markdown` writes that table).

``read`` may use every ``GET`` (the API, the dashboard's pages, logs and streams, metrics)
and the ``POST`` routes in :data:`READ_ROUTES` that only compute an answer; ``operate`` adds
the routes listed in :data:`OPERATE_ROUTES`; every other route, and anything under
:data:`ADMIN_PREFIXES` (maintenance and token management, reads included), needs ``admin``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from starlette.routing import BaseRoute, Route, compile_path
from starlette.types import Scope

from ._dashboard._paths import is_dashboard_path
from ._tokens._roles import Role

ADMIN_PREFIX = "/api/admin"
#: Paths whose every method, ``GET`` included, needs ``admin``: a token list is for admins only.
ADMIN_PREFIXES = (ADMIN_PREFIX, "/api/tokens")
#: Paths served without a token (liveness probes must work without the secret).
PUBLIC_PATHS = frozenset({"/api/health"})

#: ``POST`` routes that write nothing: a schedule set's plan (what CI runs on a pull request,
#: with a token that cannot change anything; ``/api/schedule-sets/apply`` needs ``admin``).
READ_ROUTES: frozenset[tuple[str, str]] = frozenset({("POST", "/api/schedule-sets/plan")})

#: Changes an operator makes to work that exists: trigger, cancel, enable/disable,
#: retry/ack/purge dispatches, backfill, ad-hoc runs and enqueued dispatches.
OPERATE_ROUTES: frozenset[tuple[str, str]] = frozenset(
    {
        ("POST", "/api/runs"),
        ("POST", "/api/runs/{run_id}/cancel"),
        ("DELETE", "/api/runs/{run_id}"),
        ("POST", "/api/schedules/{schedule_id}/trigger"),
        ("POST", "/api/schedules/{schedule_id}/enable"),
        ("POST", "/api/schedules/{schedule_id}/disable"),
        ("POST", "/api/schedules/{schedule_id}/backfill"),
        ("POST", "/api/schedules/runs/{run_id}/cancel"),
        ("POST", "/api/dispatch"),
        ("POST", "/api/dispatch/{dispatch_id}/ack"),
        ("POST", "/api/dispatch/{dispatch_id}/retry"),
        ("DELETE", "/api/dispatch/{dispatch_id}"),
    }
)

#: The dashboard's forms (``/<area>/<id>/<verb>``) and the API request each one makes: a form
#: needs the role of its request, and the dashboard hides the ones the visitor's role may not use.
DASHBOARD_FORMS: dict[tuple[str, str], tuple[str, str]] = {
    ("schedules", "trigger"): ("POST", "/api/schedules/{schedule_id}/trigger"),
    ("schedules", "enable"): ("POST", "/api/schedules/{schedule_id}/enable"),
    ("schedules", "disable"): ("POST", "/api/schedules/{schedule_id}/disable"),
    ("schedules", "delete"): ("DELETE", "/api/schedules/{schedule_id}"),
    ("schedules", "force-delete"): ("DELETE", "/api/schedules/{schedule_id}"),
    ("schedules", "edit"): ("PATCH", "/api/schedules/{schedule_id}"),
    ("runs", "cancel"): ("POST", "/api/schedules/runs/{run_id}/cancel"),
    ("dispatch", "retry"): ("POST", "/api/dispatch/{dispatch_id}/retry"),
    ("dispatch", "ack"): ("POST", "/api/dispatch/{dispatch_id}/ack"),
    ("dispatch", "purge"): ("DELETE", "/api/dispatch/{dispatch_id}"),
}


def is_admin_path(path: str) -> bool:
    """Whether ``path`` lies under one of :data:`ADMIN_PREFIXES`."""
    return any(path == prefix or path.startswith(prefix + "/") for prefix in ADMIN_PREFIXES)


def role_for(method: str, path: str) -> Role:
    """The role ``method path`` needs, ``path`` being a route's template."""
    if is_admin_path(path):
        return "admin"
    if method in ("GET", "HEAD") or (method, path) in READ_ROUTES:
        return "read"
    if (method, path) in OPERATE_ROUTES:
        return "operate"
    return "admin"


def form_role(url: str) -> Role:
    """The role a dashboard form posting to ``url`` needs (``admin`` for an unknown form;
    ``POST /schedules``, the create form, included)."""
    parts = url.strip("/").split("/")
    if len(parts) == 3 and (parts[0], parts[2]) in DASHBOARD_FORMS:
        return role_for(*DASHBOARD_FORMS[(parts[0], parts[2])])
    return "admin"


def flat_routes(routes: Iterable[BaseRoute]) -> Iterator[tuple[frozenset[str], str]]:
    """Each endpoint of an app as ``(methods, path template)``, through included routers
    (FastAPI keeps those as one route each that holds the router's own routes)."""
    for route in routes:
        if isinstance(route, Route):
            yield frozenset(route.methods or ()), route.path
            continue
        contexts = getattr(route, "effective_route_contexts", None)
        if contexts is None:
            continue
        for context in contexts():
            original = context.original_route
            methods = getattr(original, "methods", None)
            if methods:
                yield frozenset(methods), str(context.path)


class RouteRoles:
    """The role of a request, from the route of ``routes`` it matches (``read`` when none
    matches: an unknown path answers 404 to a reader and a 401 to nobody)."""

    def __init__(self, routes: Iterable[BaseRoute]) -> None:
        self._routes: list[tuple[re.Pattern[str], dict[str, Role]]] = []
        by_path: dict[str, dict[str, Role]] = {}
        for methods, path in flat_routes(routes):
            roles = by_path.setdefault(path, {})
            for method in methods:
                roles[method] = role_for(method, path)
        for path, roles in by_path.items():
            regex, _, _ = compile_path(path)
            self._routes.append((regex, roles))

    def required(self, scope: Scope) -> Role:
        """The role the request of ``scope`` needs."""
        method = scope.get("method", "GET")
        path = scope.get("path", "")
        if is_admin_path(path):
            return "admin"
        fallback: Role = "read"
        for regex, roles in self._routes:
            if regex.match(path):
                if method in roles:
                    return roles[method]
                # a path some route serves with another method: 405 to whoever may write
                fallback = "read" if method in ("GET", "HEAD") else "admin"
        return fallback


@dataclass(frozen=True)
class RouteRole:
    """One row of the published table."""

    method: str
    path: str
    role: Role


def route_roles(routes: Iterable[BaseRoute]) -> list[RouteRole]:
    """Every bearer-token route of an app (the dashboard's pages excluded) and its role,
    sorted by path then method."""
    rows = {
        RouteRole(method, path, role_for(method, path))
        for methods, path in flat_routes(routes)
        if not is_dashboard_path(path)
        for method in methods
        if method != "HEAD"
    }
    return sorted(rows, key=lambda row: (row.path, row.method))


def roles_markdown(routes: Iterable[BaseRoute]) -> str:
    """The route table of ``docs/operations.md`` (section "Tokens and roles")."""
    lines = ["| method | path | role |", "|---|---|---|"]
    lines += [
        f"| {r.method} | `{r.path}` | {'none (public)' if r.path in PUBLIC_PATHS else r.role} |"
        for r in route_roles(routes)
    ]
    return "\n".join(lines) + "\n"


TABLE_START = "<!-- roles-table:start (generated: python -m studio_api._roles --write FILE) -->"
TABLE_END = "<!-- roles-table:end -->"


def with_table(document: str, table: str) -> str:
    """``document`` with the text between the table markers replaced by ``table``."""
    head, start, rest = document.partition(TABLE_START)
    _, end, tail = rest.partition(TABLE_END)
    if not start or not end:
        raise ValueError(f"the document has no {TABLE_START!r} … {TABLE_END!r} block")
    return f"{head}{TABLE_START}\n{table}{TABLE_END}{tail}"


def main(argv: list[str] | None = None) -> int:
    """Print the route table, or with ``--write FILE`` put it between the markers of FILE."""
    import sys
    import tempfile
    from pathlib import Path

    from ._app import create_app
    from ._settings import StudioSettings

    args = sys.argv[1:] if argv is None else argv
    with tempfile.TemporaryDirectory() as scratch:
        app = create_app(StudioSettings.from_env({}, db=Path(scratch) / "state.db"))
        table = roles_markdown(app.routes)
    if args[:1] == ["--write"] and len(args) == 2:
        target = Path(args[1])
        target.write_text(with_table(target.read_text(), table))
        return 0
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
