"""The ``api_tokens`` table (studio-state's migration 2): one SQL text for both dialects."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Any

import aiosqlite

from studio_scheduler_core._recovery.retention_rows import STUDIO_ACTORS
from studio_state import fetch_all, fetch_one, record_transition, write_transaction

from ._roles import Principal, Role, check_role

#: What every scoped token starts with (tells it apart from ``LIONAGI_STUDIO_AUTH_TOKEN``).
TOKEN_PREFIX = "sst_"  # noqa: S105 - a prefix, not a secret
_TOKEN = re.compile(r"sst_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_LIFETIME = re.compile(r"(\d{1,6})([smhdw])")
_LIFETIME_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: Actor names Studio itself uses in the audit trail: no token may take them (an engine
#: name would also hide the token's changes from retention's audit rows).
RESERVED_NAMES = frozenset({"auth-token", "api", "studio", "consumer", "operator", *STUDIO_ACTORS})
_COLUMNS = "id, name, role, created_at, created_by, expires_at, last_used_at, revoked_at"


class TokenError(Exception):
    """A token operation was refused (the message names the argument)."""


class InvalidTokenArgument(TokenError, ValueError):
    """A bad name, role or expiry."""


class TokenNameTaken(TokenError):
    """A live token already has this name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"name: a live token is already called {name!r} (revoke it first)")
        self.name = name


class TokenNotFound(TokenError, LookupError):
    """No live token has this name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"name: no live token is called {name!r}")
        self.name = name


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """One ``api_tokens`` row, without its salt and digest."""

    id: str
    name: str
    role: Role
    created_at: float
    created_by: str | None
    expires_at: float | None
    last_used_at: float | None
    revoked_at: float | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TokenInfo:
        return cls(
            id=str(row["id"]),
            name=str(row["name"]),
            role=check_role(str(row["role"])),
            created_at=float(row["created_at"]),
            created_by=row["created_by"],
            expires_at=None if row["expires_at"] is None else float(row["expires_at"]),
            last_used_at=None if row["last_used_at"] is None else float(row["last_used_at"]),
            revoked_at=None if row["revoked_at"] is None else float(row["revoked_at"]),
        )

    def live(self, now: float) -> bool:
        """Neither revoked nor expired at ``now``."""
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    def state(self, now: float) -> str:
        """``live``, ``expired`` or ``revoked``."""
        if self.revoked_at is not None:
            return "revoked"
        return "live" if self.live(now) else "expired"


def check_name(name: str) -> str:
    """``name`` if it is a token name (1-64 of letters, digits, ``.``, ``_``, ``@``, ``-``)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidTokenArgument(
            "name: 1-64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit"
        )
    if name in RESERVED_NAMES:
        raise InvalidTokenArgument(f"name: {name!r} is an actor name Studio uses itself")
    return name


def parse_lifetime(text: str) -> float:
    """A token's lifetime written like ``90d``, ``12h`` or ``2w``, in seconds.

    Raises :class:`InvalidTokenArgument` naming ``expires``.
    """
    match = _LIFETIME.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or int(match.group(1)) == 0:
        raise InvalidTokenArgument(f"expires: {text!r} is not a duration like 90d, 12h or 2w")
    return float(int(match.group(1)) * _LIFETIME_UNITS[match.group(2)])


def parse_token(text: str) -> tuple[str, str] | None:
    """The ``(id, secret)`` of a scoped token's text, or ``None`` when it is not one."""
    match = _TOKEN.fullmatch(text)
    return (match.group(1), match.group(2)) if match else None


def _digest(salt: str, secret: str) -> str:
    return hmac.new(bytes.fromhex(salt), secret.encode(), hashlib.sha256).hexdigest()


async def create_token(
    conn: aiosqlite.Connection,
    name: str,
    role: str,
    *,
    now: float,
    expires_at: float | None = None,
    actor: str,
) -> tuple[TokenInfo, str]:
    """Store a new token; return its row and its text (the only time the text exists).

    One transaction writes the row and its ``token.created`` audit row. Raises
    :class:`InvalidTokenArgument` or :class:`TokenNameTaken`.
    """
    name = check_name(name)
    try:
        checked_role = check_role(role)
    except ValueError as exc:
        raise InvalidTokenArgument(f"role: {exc}") from None
    if expires_at is not None and expires_at <= now:
        raise InvalidTokenArgument("expires: must be in the future")
    token_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    async with write_transaction(conn):
        taken = await fetch_one(
            conn, "SELECT id FROM api_tokens WHERE name = ? AND revoked_at IS NULL", (name,)
        )
        if taken is not None:
            raise TokenNameTaken(name)
        await conn.execute(
            "INSERT INTO api_tokens (id, name, role, salt, digest, created_at, created_by, "
            "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (token_id, name, checked_role, salt, _digest(salt, secret), now, actor, expires_at),
        )
        await record_transition(
            conn,
            entity_type="token",
            entity_id=token_id,
            status="live",
            reason_code="token.created",
            reason_summary=f"token {name!r} created with role {checked_role}",
            actor=actor,
            metadata={"name": name, "role": checked_role, "expires_at": expires_at},
            now=now,
        )
    info = TokenInfo(token_id, name, checked_role, now, actor, expires_at, None, None)
    return info, f"{TOKEN_PREFIX}{token_id}_{secret}"


async def revoke_token(
    conn: aiosqlite.Connection, name: str, *, now: float, actor: str
) -> TokenInfo:
    """Revoke the live token called ``name`` (refused at once by every node from then on).

    Writes ``revoked_at`` and the ``token.revoked`` audit row in one transaction. Raises
    :class:`TokenNotFound`.
    """
    name = check_name(name)
    async with write_transaction(conn):
        row = await fetch_one(
            conn,
            f"SELECT {_COLUMNS} FROM api_tokens WHERE name = ? AND revoked_at IS NULL",
            (name,),
        )
        if row is None:
            raise TokenNotFound(name)
        await conn.execute(
            "UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
            (now, row["id"]),
        )
        await record_transition(
            conn,
            entity_type="token",
            entity_id=str(row["id"]),
            previous_status="live",
            status="revoked",
            reason_code="token.revoked",
            reason_summary=f"token {name!r} revoked",
            actor=actor,
            metadata={"name": name, "role": row["role"]},
            now=now,
        )
    return TokenInfo.from_row({**row, "revoked_at": now})


async def list_tokens(
    conn: aiosqlite.Connection, *, include_revoked: bool = False
) -> list[TokenInfo]:
    """Every token (live and expired; revoked ones too with ``include_revoked``), by name."""
    where = "" if include_revoked else " WHERE revoked_at IS NULL"
    rows = await fetch_all(
        conn, f"SELECT {_COLUMNS} FROM api_tokens{where} ORDER BY name, created_at"
    )
    return [TokenInfo.from_row(row) for row in rows]


async def find_token(conn: aiosqlite.Connection, text: str, *, now: float) -> Principal | None:
    """The principal a presented token stands for, or ``None`` (unknown, wrong secret,
    revoked or expired). One read by the token's id; the digest compare is constant-time."""
    parsed = parse_token(text)
    if parsed is None:
        return None
    token_id, secret = parsed
    row = await fetch_one(
        conn,
        "SELECT name, role, salt, digest, expires_at, revoked_at FROM api_tokens WHERE id = ?",
        (token_id,),
    )
    if row is None:
        return None
    if not hmac.compare_digest(_digest(str(row["salt"]), secret), str(row["digest"])):
        return None
    if row["revoked_at"] is not None:
        return None
    if row["expires_at"] is not None and float(row["expires_at"]) <= now:
        return None
    return Principal(str(row["name"]), check_role(str(row["role"])), token_id)


async def principal_of_id(
    conn: aiosqlite.Connection, token_id: str, *, now: float
) -> Principal | None:
    """The principal of the live token ``token_id`` (a dashboard session names it)."""
    row = await fetch_one(
        conn,
        "SELECT name, role FROM api_tokens WHERE id = ? AND revoked_at IS NULL "
        "AND (expires_at IS NULL OR expires_at > ?)",
        (token_id, now),
    )
    if row is None:
        return None
    return Principal(str(row["name"]), check_role(str(row["role"])), token_id)


async def any_live_token(conn: aiosqlite.Connection, *, now: float) -> bool:
    """Whether the database holds at least one live token (then authentication is enforced)."""
    row = await fetch_one(
        conn,
        "SELECT 1 AS live FROM api_tokens WHERE revoked_at IS NULL "
        "AND (expires_at IS NULL OR expires_at > ?) LIMIT 1",
        (now,),
    )
    return row is not None


async def touch_token(conn: aiosqlite.Connection, token_id: str, *, now: float) -> None:
    """Set the token's ``last_used_at`` (the caller writes it at most once a minute)."""
    async with write_transaction(conn):
        await conn.execute("UPDATE api_tokens SET last_used_at = ? WHERE id = ?", (now, token_id))
