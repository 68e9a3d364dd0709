"""Outbox models: bodies and answers of ``/api/dispatch``; ``DispatchOut`` is derived from
:class:`studio_outbox.Dispatch` (its public columns)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, ValidationInfo, field_validator

from studio_outbox import Dispatch, DispatchStatus

from .._bounds import MAX_COUNT, MIN_COUNT
from .base import RequestModel, ResponseModel
from .derive import of_dataclass, response_model

Count = Annotated[int, Field(ge=MIN_COUNT, le=MAX_COUNT)]

__all__ = [
    "AckRequest",
    "DispatchCreate",
    "DispatchCreated",
    "DispatchList",
    "DispatchOut",
    "DispatchStatus",
]


class DispatchCreate(RequestModel):
    """Body of ``POST /api/dispatch``: :func:`studio_outbox.enqueue_dispatch`'s arguments."""

    kind: str
    deliver_to: str
    body: dict[str, Any] | None = None
    dedup_key: str | None = None
    ack_required: bool = False
    max_attempts: Count = 8
    expires_at: float | None = None
    session_id: str | None = None
    schedule_run_id: str | None = None


class AckRequest(RequestModel):
    """Body of ``POST /api/dispatch/{id}/ack``: the receiver's ``token``, or
    ``{"operator": true}`` for an operator's ack without it (recorded with the actor)."""

    operator: bool = False
    token: Annotated[str | None, Field(validate_default=True)] = None

    @field_validator("token", mode="after")
    @classmethod
    def _one_way(cls, token: str | None, info: ValidationInfo) -> str | None:
        operator = info.data.get("operator", False)
        if operator and token is not None:
            raise ValueError("give the receiver's token or operator: true, not both")
        if not operator and token is None:
            raise ValueError("required unless operator is true")
        return token


class _DispatchView(ResponseModel):
    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DispatchOut:
        """The public view of a dispatch row: ``ack_token`` removed everywhere."""
        values = dict(row)
        values.pop("ack_token", None)
        payload = values.get("payload")
        if isinstance(payload, Mapping):
            values["payload"] = {k: v for k, v in payload.items() if k != "ack_token"}
        elif payload is not None:
            values["payload"] = None
        values["ack_required"] = bool(values.get("ack_required"))
        return DispatchOut.of(values)


if TYPE_CHECKING:

    class DispatchOut(_DispatchView): ...

else:
    DispatchOut = response_model(
        "DispatchOut",
        "An outbox row. The ack token is never shown (neither as a column nor in the payload).",
        of_dataclass(Dispatch),
        base=_DispatchView,
    )


class DispatchCreated(ResponseModel):
    """Answer of ``POST /api/dispatch``: the row's id; ``created`` false on a dedup hit."""

    id: str
    created: bool


class DispatchList(ResponseModel):
    """One page of outbox rows; ``total`` counts every match."""

    dispatches: list[DispatchOut]
    total: int
    limit: int
    offset: int
    next_cursor: str | None = None
    """Pass as ``?cursor=`` for the next page (keyset: a deep page costs what the first
    does); ``None`` on the last page."""
