"""Column metadata of a record field, and the field sets derived from it.

A record is a frozen dataclass whose fields are a table's columns, in column order; each field
carries a :class:`Column` in its metadata (``field(metadata=column(...))``). Everything that
used to repeat a field list (the INSERT column list, the JSON columns, the create/update
fields, the follow-up overlay keys, the API models) asks this module instead.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

R = TypeVar("R")

_KEY = "studio_column"


@dataclass(frozen=True)
class Column:
    """What a record field is, beyond its type."""

    json: bool = False
    """Stored as JSON text, decoded on read."""
    create: bool = False
    """Accepted as input by create (and by the service's update)."""
    update: bool | None = None
    """Accepted in an update body (``PATCH``); ``None`` means the same as ``create``."""
    not_null: bool = False
    """Input may not set it to null (create falls back to the field's default)."""
    overlay: tuple[str, ...] = ()
    """The follow-up overlay keys (``on_success``/``on_fail``) that override this column."""
    kinds: tuple[str, ...] | None = None
    """The action kinds that use this column (``None``: every kind); a follow-up of another kind
    may not set it."""
    maximum: float | None = None
    """The largest value accepted (inclusive); an integer input field with a maximum is checked
    as ``1..maximum`` by the service, and the API refuses beyond it early when ``_bounds``
    names it."""
    own_check: bool = False
    """A dedicated check validates it (no generic type check by its annotation)."""
    public: bool = True
    """Part of the record's public (API) view."""
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Accepted input spellings stored under another value (``playbook`` → ``play``)."""


def column(**meta: Any) -> dict[str, Column]:
    """Field metadata: ``field(default=None, metadata=column(create=True, json=True))``."""
    return {_KEY: Column(**meta)}


@dataclass(frozen=True)
class Spec:
    """One record field: its name, resolved type, default and :class:`Column`."""

    name: str
    annotation: Any
    default: Any
    meta: Column

    @property
    def required(self) -> bool:
        """The field has no default."""
        return self.default is dataclasses.MISSING

    @property
    def updatable(self) -> bool:
        """Accepted in an update body."""
        return self.meta.create if self.meta.update is None else self.meta.update

    @property
    def base(self) -> Any:
        """The annotation without ``None``."""
        return strip_none(self.annotation)

    @property
    def shape(self) -> Literal["text", "object", "list", "choice", "bool", "int", "number", "any"]:
        """The value's shape, by its annotation."""
        base = self.base
        origin = get_origin(base)
        if origin is Literal:
            return "choice"
        if origin is tuple:
            return "list"
        if base is str:
            return "text"
        if base is bool:
            return "bool"
        if base is int:
            return "int"
        if base is float:
            return "number"
        if base is Mapping or origin is Mapping or origin is dict:
            return "object"
        return "any"


def strip_none(annotation: Any) -> Any:
    """``X | None`` → ``X`` (anything else unchanged)."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


_SPECS: dict[type[Any], tuple[Spec, ...]] = {}


def specs(record: type[Any]) -> tuple[Spec, ...]:
    """The record's fields in column order, each with its :class:`Column` metadata."""
    known = _SPECS.get(record)
    if known is not None:
        return known
    hints = typing.get_type_hints(record)
    out = []
    for f in dataclasses.fields(record):
        default: Any = f.default
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        meta = f.metadata.get(_KEY, Column())
        out.append(Spec(f.name, hints[f.name], default, meta))
    _SPECS[record] = tuple(out)
    return _SPECS[record]


record_specs = specs


def spec(record: type[Any], name: str) -> Spec:
    """One field of the record (``KeyError`` when there is none)."""
    for item in specs(record):
        if item.name == name:
            return item
    raise KeyError(name)


def columns(record: type[Any]) -> tuple[str, ...]:
    """Every column, in order."""
    return tuple(s.name for s in specs(record))


def public_columns(record: type[Any]) -> tuple[str, ...]:
    """The columns of the record's public view."""
    return tuple(s.name for s in specs(record) if s.meta.public)


def json_columns(record: type[Any]) -> tuple[str, ...]:
    """Columns stored as JSON text."""
    return tuple(s.name for s in specs(record) if s.meta.json)


def list_columns(record: type[Any]) -> tuple[str, ...]:
    """Columns holding a list (read back as ``[]`` when NULL)."""
    return tuple(s.name for s in specs(record) if s.shape == "list")


def bool_columns(record: type[Any]) -> tuple[str, ...]:
    """Columns holding a boolean (stored as 0/1, NULL kept for a nullable one)."""
    return tuple(s.name for s in specs(record) if s.shape == "bool")


def create_fields(record: type[Any]) -> tuple[str, ...]:
    """Fields create input may set."""
    return tuple(s.name for s in specs(record) if s.meta.create)


def update_fields(record: type[Any]) -> tuple[str, ...]:
    """Fields an update body may set."""
    return tuple(s.name for s in specs(record) if s.updatable)


def not_null_fields(record: type[Any]) -> frozenset[str]:
    """Input fields that may not be null."""
    return frozenset(s.name for s in specs(record) if s.meta.not_null)


def overlay_keys(record: type[Any]) -> dict[str, str]:
    """Follow-up overlay key → the column it overrides, in field order."""
    return {key: s.name for s in specs(record) for key in s.meta.overlay}


def kind_keys(record: type[Any]) -> dict[str, frozenset[str]]:
    """Action kind → the overlay keys a follow-up of that kind can use."""
    every = {key for s in specs(record) if s.meta.kinds is None for key in s.meta.overlay}
    kinds = {kind for s in specs(record) for kind in s.meta.kinds or ()}
    return {
        kind: frozenset(
            every
            | {key for s in specs(record) if kind in (s.meta.kinds or ()) for key in s.meta.overlay}
        )
        for kind in sorted(kinds)
    }


def maximum(record: type[Any], name: str) -> float:
    """The field's upper bound (``KeyError`` when it has none)."""
    bound = spec(record, name).meta.maximum
    if bound is None:
        raise KeyError(name)
    return bound


@dataclass(frozen=True)
class _Build:
    defaults: dict[str, object]
    required: frozenset[str]
    names: frozenset[str]
    listy: tuple[str, ...]
    """The fields a row can hold a list in (JSON and list columns)."""


_BUILDS: dict[type[Any], _Build] = {}


def _build(record: type[Any]) -> _Build:
    known = _BUILDS.get(record)
    if known is None:
        fields = specs(record)
        known = _BUILDS[record] = _Build(
            {s.name: s.default for s in fields if not s.required},
            frozenset(s.name for s in fields if s.required),
            frozenset(s.name for s in fields),
            tuple(s.name for s in fields if s.meta.json or s.shape in ("list", "any")),
        )
    return known


def from_row(record: type[R], row: Mapping[str, Any]) -> R:
    """A record built from a decoded row (keys that are not fields are ignored; lists become
    tuples). ``TypeError`` names a required field the row lacks.

    The stores build one per row read, so this fills the instance's fields directly instead of
    going through the frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field,
    several times the cost of decoding the row); the records have no ``__post_init__``.
    """
    build = _build(record)
    out: R = object.__new__(record)
    values = out.__dict__
    values.update(build.defaults)
    values.update(row)
    if len(values) != len(build.names):  # keys that are no field of the record
        for name in values.keys() - build.names:
            del values[name]
    if not build.required <= values.keys():
        missing = sorted(build.required - values.keys())
        raise TypeError(f"{record.__name__}: missing {', '.join(missing)}")
    for name in build.listy:
        value = values.get(name)
        if isinstance(value, list):
            values[name] = tuple(value)
    return out


def to_row(value: Any) -> dict[str, Any]:
    """A record as the public dict (tuples become lists; the values are not copied)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        item = getattr(value, f.name)
        out[f.name] = list(item) if isinstance(item, tuple) else item
    return out
