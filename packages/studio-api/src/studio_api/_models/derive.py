"""Pydantic models derived from the records' fields (``Schedule``, ``Action``, ``Run``,
``Dispatch``), so a new column reaches the API without editing a model.

Requests take each input field by its shape (a ``Literal`` stays a ``Literal``, a tuple is a
list, a mapping an object) with the early bound of ``_bounds`` on numbers, and a seconds field
(``*_sec``) also takes a duration string; responses take every
public column with plain types (a stored ``Literal`` is a ``str``).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_origin

from pydantic import BeforeValidator, Field, create_model

from studio_scheduler_core import ScheduleValidationError, Spec, parse_duration

from .._bounds import FIELD_LIMITS, MIN_COUNT
from .base import RequestModel, ResponseModel


@dataclass(frozen=True)
class FieldView:
    """What the derivation needs of a record field."""

    name: str
    annotation: Any
    default: Any
    required: bool
    """No default: the column is always present."""
    not_null: bool = False


def of_specs(specs: Iterable[Spec]) -> list[FieldView]:
    """Views of scheduler-core record fields (their :class:`~studio_scheduler_core.Column`)."""
    return [FieldView(s.name, s.annotation, s.default, s.required, s.meta.not_null) for s in specs]


def of_dataclass(record: type[Any]) -> list[FieldView]:
    """Views of a plain dataclass record's public fields (``metadata={"public": False}`` out)."""
    hints = typing.get_type_hints(record)
    out = []
    for f in dataclasses.fields(record):
        if not f.metadata.get("public", True):
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append(FieldView(f.name, hints[f.name], f.default, required))
    return out


def _strip_none(annotation: Any) -> tuple[Any, bool]:
    args = typing.get_args(annotation)
    if get_origin(annotation) in (typing.Union, type(int | None)) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return rest[0], True
    return annotation, False


def _plain(base: Any) -> Any:
    origin = get_origin(base)
    if origin is tuple:
        return list[str]
    if base is Mapping or origin is Mapping:
        return dict[str, Any]
    return base


_INTEGER = re.compile(r"[+-]?[0-9]+")


def _seconds(field: str) -> BeforeValidator:
    """A seconds field also takes a duration (``"90s"``, ``"15m"``, ``"2h"``, ``"1d"``)."""

    def convert(value: Any) -> Any:
        # digits (signed or not) stay for the integer check, so its bounds name the field
        if not isinstance(value, str) or _INTEGER.fullmatch(value.strip()):
            return value
        try:
            return parse_duration(field, value)
        except ScheduleValidationError as exc:
            raise ValueError(exc.message) from None

    return BeforeValidator(convert)


def _request_type(view: FieldView) -> Any:
    base, _ = _strip_none(view.annotation)
    limit = FIELD_LIMITS.get(view.name)
    if base is int and view.name.endswith("_sec"):
        bound = Field(ge=MIN_COUNT, le=limit) if limit is not None else Field()
        return Annotated[int, _seconds(view.name), bound]
    if limit is not None and base is int:
        return Annotated[int, Field(ge=MIN_COUNT, le=limit)]
    if limit is not None and base is float:
        return Annotated[float, Field(allow_inf_nan=False, ge=-limit, le=limit)]
    return _plain(base)


def request_model(
    name: str,
    doc: str,
    views: Iterable[FieldView],
    *,
    partial: bool,
    examples: list[dict[str, Any]] | None = None,
) -> Any:
    """A request body: each field optional (null), except ``not_null`` fields on create
    (``partial=False``), which take the record's default or are required. ``examples`` go to
    the model's JSON schema (and so to the OpenAPI document)."""
    fields: dict[str, Any] = {}
    for view in views:
        kind = _request_type(view)
        if view.not_null and not partial:
            fields[view.name] = (kind, ...) if view.required else (kind, view.default)
        else:
            fields[view.name] = (kind | None, None)
    base: type[Any] = RequestModel
    if examples:
        config = {**RequestModel.model_config, "json_schema_extra": {"examples": examples}}
        base = type(f"{name}Base", (RequestModel,), {"model_config": config, "__doc__": doc})
    return _create(name, doc, base, fields)


def _response_type(view: FieldView) -> Any:
    base, nullable = _strip_none(view.annotation)
    if get_origin(base) is Literal:
        base = str
    kind = _plain(base)
    return kind | None if nullable and base is not Any else kind


def response_model(
    name: str, doc: str, views: Iterable[FieldView], *, base: type[Any] = ResponseModel
) -> Any:
    """A response body with every given column; a column without a default (or never null) is
    required, the rest take the record's default."""
    fields: dict[str, Any] = {}
    for view in views:
        kind = _response_type(view)
        if view.required or view.not_null:
            fields[view.name] = (kind, ...)
        elif isinstance(view.default, tuple):
            fields[view.name] = (kind, Field(default_factory=list))
        else:
            fields[view.name] = (kind, view.default)
    return _create(name, doc, base, fields)


def _create(name: str, doc: str, base: type[Any], fields: dict[str, Any]) -> Any:
    return create_model(name, __base__=base, __doc__=doc, __module__=__name__, **fields)
