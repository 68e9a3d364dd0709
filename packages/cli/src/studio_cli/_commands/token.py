"""``studio token …``: scoped API tokens (read, operate, admin), on the database directly.

A token is printed once, by ``create``; the database keeps only a salted digest, so every
node of a cluster knows it and none can show it again.
"""

from __future__ import annotations

import time
from typing import Any

import click

from .._context import open_db, resolve_db_path, run_async
from .._errors import CliError
from .._output import emit_json, fmt_time, print_rows, say
from ._actor import cli_actor
from ._common import db_option, json_option

_ROLES = ("read", "operate", "admin")


def parse_expires(text: str | None) -> float | None:
    """``--expires``: a duration like ``90d``, ``12h``, ``2w`` as seconds (``None``: never)."""
    if text is None:
        return None
    from studio_api._tokens import InvalidTokenArgument, parse_lifetime

    try:
        return parse_lifetime(text)
    except InvalidTokenArgument as exc:
        raise CliError(f"--{exc}") from None


@click.group("token")
def token_group() -> None:
    """Create, list and revoke scoped API tokens (roles: read, operate, admin).

    read: every GET (API, dashboard, logs, metrics). operate: read plus trigger, cancel,
    enable/disable, retry/ack/purge dispatches, backfill, ad-hoc runs. admin: everything.
    """


@token_group.command("create")
@click.argument("name")
@click.option("--role", required=True, type=click.Choice(_ROLES), help="What it may do.")
@click.option("--expires", metavar="DURATION", help="Lifetime, e.g. 90d, 12h, 2w (default: none).")
@db_option
@json_option
def create(name: str, role: str, expires: str | None, db: str | None, as_json: bool) -> None:
    """Create token NAME with ROLE and print it (the only time it is shown)."""
    lifetime = parse_expires(expires)
    db_path = resolve_db_path(db)

    async def _create() -> tuple[Any, str]:
        from studio_api._tokens import TokenError, create_token

        now = time.time()
        async with open_db(db_path) as conn:
            try:
                return await create_token(
                    conn,
                    name,
                    role,
                    now=now,
                    expires_at=None if lifetime is None else now + lifetime,
                    actor=cli_actor(),
                )
            except TokenError as exc:
                raise CliError(str(exc)) from None

    info, text = run_async(_create)
    if as_json:
        emit_json(
            {"name": info.name, "role": info.role, "expires_at": info.expires_at, "token": text}
        )
        return
    until = f", expires {fmt_time(info.expires_at)}" if info.expires_at is not None else ""
    say(f"Created token {info.name} (role {info.role}{until}). It is shown only now:")
    click.echo(text)


@token_group.command("list")
@click.option("--all", "include_revoked", is_flag=True, help="Include revoked tokens.")
@db_option
@json_option
def list_(include_revoked: bool, db: str | None, as_json: bool) -> None:
    """Tokens: name, role, state, created, last used, expiry (never the token itself)."""
    db_path = resolve_db_path(db, existing=True)

    async def _list() -> list[Any]:
        from studio_api._tokens import list_tokens

        async with open_db(db_path) as conn:
            return await list_tokens(conn, include_revoked=include_revoked)

    tokens = run_async(_list)
    now = time.time()
    if as_json:
        emit_json(
            [
                {
                    "name": t.name,
                    "role": t.role,
                    "state": t.state(now),
                    "created_at": t.created_at,
                    "created_by": t.created_by,
                    "last_used_at": t.last_used_at,
                    "expires_at": t.expires_at,
                    "revoked_at": t.revoked_at,
                }
                for t in tokens
            ]
        )
        return
    print_rows(
        ("NAME", "ROLE", "STATE", "CREATED", "LAST USED", "EXPIRES"),
        [
            [
                t.name,
                t.role,
                t.state(now),
                fmt_time(t.created_at),
                fmt_time(t.last_used_at) if t.last_used_at is not None else "never",
                fmt_time(t.expires_at) if t.expires_at is not None else "never",
            ]
            for t in tokens
        ],
        empty="No tokens.",
    )


@token_group.command("revoke")
@click.argument("name")
@db_option
@json_option
def revoke(name: str, db: str | None, as_json: bool) -> None:
    """Revoke token NAME: every node refuses it from the next request on."""
    db_path = resolve_db_path(db, existing=True)

    async def _revoke() -> Any:
        from studio_api._tokens import TokenError, revoke_token

        async with open_db(db_path) as conn:
            try:
                return await revoke_token(conn, name, now=time.time(), actor=cli_actor())
            except TokenError as exc:
                raise CliError(str(exc)) from None

    info = run_async(_revoke)
    if as_json:
        emit_json({"name": info.name, "role": info.role, "revoked_at": info.revoked_at})
    else:
        say(f"Revoked token {info.name} (role {info.role})")
