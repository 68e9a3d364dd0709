"""Parameter types and value parsers shared by the commands (stdlib + click only)."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from typing import IO, Any, TypeVar, get_args

import click

from ._errors import CliError

F = TypeVar("F", bound=Callable[..., Any])


class VocabularyChoice(click.Choice[str]):
    """A ``click.Choice`` over one of a package's vocabularies (``RUN_STATUSES`` …).

    The values are read from ``module`` (scheduler-core unless told) when first needed
    (parsing the option, or its command's help), so ``studio --help`` imports no Studio
    package.
    """

    def __init__(self, vocabulary: str, module: str = "studio_scheduler_core") -> None:
        self._vocabulary = vocabulary
        self._module = module
        self._values: tuple[str, ...] | None = None
        self.case_sensitive = True

    @property
    def choices(self) -> tuple[str, ...]:
        if self._values is None:
            self._values = tuple(vocabulary(self._vocabulary, self._module))
        return self._values

    @choices.setter
    def choices(self, values: Any) -> None:
        self._values = tuple(values)


def vocabulary(name: str, module: str = "studio_scheduler_core") -> tuple[str, ...]:
    """One of a package's vocabularies by name (``ActionKindName`` gives a Literal's
    values), imported on demand."""
    value = getattr(importlib.import_module(module), name)
    args = get_args(value)
    return tuple(args) if args else tuple(value)


_DURATION = re.compile(r"(\d+)\s*([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> int:
    """``90`` / ``90s`` / ``15m`` / ``6h`` / ``2d`` / ``1w`` / ``1h30m`` → whole seconds.

    Raises ValueError on anything else (no sign, no fractions, no empty string).
    """
    raw = text.strip().lower()
    if raw.isdigit():
        return int(raw)
    if not raw:
        raise ValueError("empty duration")
    position = 0
    total = 0
    for match in _DURATION.finditer(raw):
        if match.start() != position:
            break
        total += int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(raw):
        raise ValueError(f"{text!r} is not a duration")
    return total


def duration_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """click callback: a DURATION option's text → seconds (BadParameter, exit 2, if invalid)."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a duration (seconds, or e.g. 30s, 15m, 6h, 2d, 1h30m)"
        ) from None


def duration_option(*names: str, help: str) -> Callable[[F], F]:
    """A click option taking a DURATION (seconds, or 30s / 15m / 6h / 2d / 1w / 1h30m)."""
    return click.option(*names, metavar="DURATION", callback=duration_callback, help=help)


def read_text(flag: str, stream: IO[str] | None) -> str | None:
    """The whole text of the file given to ``flag``; not UTF-8 is a one-line error (exit 1)."""
    if stream is None:
        return None
    try:
        return stream.read()
    except UnicodeDecodeError as exc:
        name = getattr(stream, "name", "the file")
        raise CliError(
            f"{flag}: {name} is not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None


def check_arguments(args: list[str]) -> None:
    """Refuse an argument that is not valid UTF-8 (naming the option it belongs to) before
    anything runs: it could not be stored, sent or printed."""
    for index, arg in enumerate(args):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            before = args[index - 1] if index > 0 else ""
            option = arg.split("=", 1)[0] if arg.startswith("--") and "=" in arg else None
            if option is None and before.startswith("-") and not arg.startswith("-"):
                option = before
            where = f"the value of {option}" if option else f"argument {index + 1}"
            raise CliError(f"{where} is not valid UTF-8 text") from None


def parse_json_flag(flag: str, text: str | None) -> Any:
    """Decode the JSON given to ``flag``; invalid JSON is a one-line error (exit 1)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{flag}: invalid JSON: {exc.msg} at position {exc.pos}") from None
    except RecursionError:
        raise CliError(f"{flag}: invalid JSON: nested too deeply") from None
