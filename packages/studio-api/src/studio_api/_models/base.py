"""The bases of every request and response model, and the storable-value check.

Request models check only shape: types, SQLite's integer range, finite numbers, the upper bound
of each numeric schedule field (``_bounds``), strings SQLite can store (valid UTF-8) and a
bounded nesting depth. The meaning of a value (a valid cron expression, a positive interval, an
allowed command …) is the schedule service's to judge, so the API and the CLI refuse the same
things with the same messages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, field_validator

SQLITE_INT_MAX = 2**63 - 1
MAX_NESTING = 32

M = TypeVar("M", bound=BaseModel)


def check_storable(value: Any, *, depth: int = 0) -> Any:
    """Refuse values that SQLite or a JSON response cannot carry; return ``value`` unchanged.

    Raises ``ValueError`` for a string that is not valid UTF-8 (lone surrogates), a
    non-finite float, an integer outside SQLite's 64-bit range, or nesting deeper than 32.
    """
    if depth > MAX_NESTING:
        raise ValueError(f"nested deeper than {MAX_NESTING} levels")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("must be valid UTF-8 text") from None
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int):
        if not -SQLITE_INT_MAX - 1 <= value <= SQLITE_INT_MAX:
            raise ValueError("integer out of range (64-bit)")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            check_storable(key, depth=depth + 1)
            check_storable(item, depth=depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            check_storable(item, depth=depth + 1)
    return value


class RequestModel(BaseModel):
    """Base of request bodies: unknown keys are refused, every value must be storable."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        return check_storable(value)


class ResponseModel(BaseModel):
    """Base of response bodies; build them with :meth:`of` so unknown row keys are dropped."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def of(cls: type[M], row: Mapping[str, Any], **extra: Any) -> M:
        """Validate the model's own keys of ``row`` (plus ``extra``)."""
        values = {name: row[name] for name in cls.model_fields if name in row}
        values.update(extra)
        return cls.model_validate(values)

    @classmethod
    def of_record(cls: type[M], record: object) -> M:
        """Validate the model's own attributes of a record (a ``Schedule``, a ``Run`` …):
        nested records are read by attribute too."""
        return cls.model_validate(record, from_attributes=True)


class ErrorOut(ResponseModel):
    """Every error body: ``detail`` names the field at fault when there is one."""

    detail: str
    field: str | None = None
    reason_code: str | None = None
    errors: list[dict[str, Any]] | None = None
