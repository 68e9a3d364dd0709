"""Scoped API tokens: roles, the salted digests in ``api_tokens``, create / list / revoke.

A token reads ``sst_<id>_<secret>``: ``id`` (12 hex) is not secret and is the table's key, so
checking a presented token is one indexed read, one HMAC-SHA256 of the secret under the
token's own random salt, and one constant-time comparison. Only the salt and the digest are
stored; the token itself is shown once, when it is created.
"""

from __future__ import annotations

from ._roles import ROLE_RANK, ROLES, Principal, Role, check_role, role_allows
from .store import (
    TOKEN_PREFIX,
    InvalidTokenArgument,
    TokenError,
    TokenInfo,
    TokenNameTaken,
    TokenNotFound,
    any_live_token,
    create_token,
    find_token,
    list_tokens,
    parse_lifetime,
    parse_token,
    revoke_token,
    touch_token,
)

__all__ = [
    "ROLES",
    "ROLE_RANK",
    "TOKEN_PREFIX",
    "InvalidTokenArgument",
    "Principal",
    "Role",
    "TokenError",
    "TokenInfo",
    "TokenNameTaken",
    "TokenNotFound",
    "any_live_token",
    "check_role",
    "create_token",
    "find_token",
    "list_tokens",
    "parse_lifetime",
    "parse_token",
    "revoke_token",
    "role_allows",
    "touch_token",
]
