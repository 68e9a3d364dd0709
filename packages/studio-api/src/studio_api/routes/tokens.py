"""``/api/tokens``: list, create and revoke scoped API tokens (admin role).

The same store as ``studio token …``: a created token is answered once and only its salted
digest is kept; a revoked one is refused by every node on its next request. Each change is
recorded in the audit trail with the caller's token name as its actor.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from .._auth_context import actor_of
from .._deps import EngineDep, responses
from .._errors import error_body
from .._models import RequestModel, ResponseModel
from .._tokens import (
    InvalidTokenArgument,
    Role,
    TokenInfo,
    TokenNameTaken,
    TokenNotFound,
    create_token,
    list_tokens,
    parse_lifetime,
    revoke_token,
)

router = APIRouter(prefix="/api/tokens", tags=["tokens"])


class TokenOut(ResponseModel):
    """One token as listed: never the token itself nor its digest."""

    name: str
    role: Role
    state: Annotated[str, Field(description="live, expired or revoked")]
    created_at: float
    created_by: str | None
    last_used_at: float | None
    expires_at: float | None
    revoked_at: float | None

    @classmethod
    def of_token(cls, info: TokenInfo, now: float) -> TokenOut:
        return cls(
            name=info.name,
            role=info.role,
            state=info.state(now),
            created_at=info.created_at,
            created_by=info.created_by,
            last_used_at=info.last_used_at,
            expires_at=info.expires_at,
            revoked_at=info.revoked_at,
        )


class TokenList(ResponseModel):
    """Every token by name (live and expired; revoked ones with ``?all=true``)."""

    tokens: list[TokenOut]


class TokenCreate(RequestModel):
    """Body of ``POST /api/tokens``."""

    name: Annotated[
        str, Field(description="1-64 letters, digits, '.', '_', '@' or '-'; the audit actor")
    ]
    role: Annotated[Role, Field(description="read, operate or admin")]
    expires: Annotated[
        str | None, Field(description="lifetime such as 90d, 12h or 2w (default: never)")
    ] = None


class TokenCreated(TokenOut):
    """A new token; ``token`` is shown in this answer only."""

    token: Annotated[str, Field(description="the bearer token; Studio cannot show it again")]


def _invalid(exc: InvalidTokenArgument) -> JSONResponse:
    field = str(exc).partition(":")[0]
    return JSONResponse(error_body(str(exc), field=field), status_code=422)


@router.get("", response_model=TokenList, responses=responses())
async def get_tokens(
    engine: EngineDep,
    include_revoked: Annotated[bool, Query(alias="all", description="revoked ones too")] = False,
) -> TokenList:
    """Tokens: name, role, state, created, last used, expiry (never the token)."""
    tokens = await list_tokens(engine.conn, include_revoked=include_revoked)
    now = engine.clock()
    return TokenList(tokens=[TokenOut.of_token(info, now) for info in tokens])


@router.post("", status_code=201, response_model=TokenCreated, responses=responses(409))
async def post_token(
    engine: EngineDep, request: Request, body: TokenCreate
) -> TokenCreated | JSONResponse:
    """Create a token and answer it once; 409 when a live token has the name."""
    now = engine.clock()
    try:
        lifetime = None if body.expires is None else parse_lifetime(body.expires)
        info, text = await create_token(
            engine.conn,
            body.name,
            body.role,
            now=now,
            expires_at=None if lifetime is None else now + lifetime,
            actor=actor_of(request),
        )
    except InvalidTokenArgument as exc:
        return _invalid(exc)
    except TokenNameTaken as exc:
        return JSONResponse(error_body(str(exc), field="name"), status_code=409)
    return TokenCreated(**TokenOut.of_token(info, now).model_dump(), token=text)


@router.delete("/{name}", response_model=TokenOut, responses=responses(404))
async def delete_token(
    engine: EngineDep, request: Request, name: Annotated[str, Path(max_length=200)]
) -> TokenOut | JSONResponse:
    """Revoke the live token ``name``: every node refuses it from its next request on."""
    now = engine.clock()
    try:
        info = await revoke_token(engine.conn, name, now=now, actor=actor_of(request))
    except InvalidTokenArgument as exc:
        return _invalid(exc)
    except TokenNotFound as exc:
        return JSONResponse(error_body(str(exc), field="name"), status_code=404)
    return TokenOut.of_token(info, now)
