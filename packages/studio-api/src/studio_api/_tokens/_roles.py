"""The three roles and who is asking (kept free of imports: the auth middleware uses it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

Role = Literal["read", "operate", "admin"]

#: Every role, weakest first: each one may do everything the ones before it may.
ROLES: tuple[Role, ...] = ("read", "operate", "admin")
ROLE_RANK: dict[str, int] = {role: rank for rank, role in enumerate(ROLES)}


def check_role(value: str) -> Role:
    """``value`` as a :data:`Role`; ``ValueError`` naming the roles otherwise."""
    if value not in ROLE_RANK:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {value!r}")
    return cast("Role", value)


def role_allows(held: str, required: str) -> bool:
    """Whether a principal holding ``held`` may use a route that needs ``required``."""
    return ROLE_RANK.get(held, -1) >= ROLE_RANK[required]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as: the actor name its audit rows carry and its role.

    ``token_id`` is the ``api_tokens`` id of a scoped token (``None`` for the configured
    ``LIONAGI_STUDIO_AUTH_TOKEN`` and for a Studio that enforces no authentication).
    """

    name: str
    role: Role
    token_id: str | None = None
