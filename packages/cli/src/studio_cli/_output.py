"""Human output as rich tables, machine output as one JSON document on stdout.

rich is imported lazily (inside the functions) so ``studio --help`` stays fast.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

# Width used when stdout is not a terminal (pipes, files, tests) and COLUMNS is unset: wide
# enough that ids, names and times are never folded or cut.
PIPE_WIDTH = 200

_consoles: dict[bool, Console] = {}


def console(*, stderr: bool = False) -> Console:
    """The rich console for stdout (or stderr); plain, wide output when not a terminal."""
    if stderr not in _consoles:
        from rich.console import Console

        stream = sys.stderr if stderr else sys.stdout
        width: int | None = None
        if not stream.isatty() and not os.environ.get("COLUMNS"):
            width = PIPE_WIDTH
        _consoles[stderr] = Console(
            file=stream, width=width, highlight=False, markup=False, soft_wrap=False, emoji=False
        )
    return _consoles[stderr]


def _json_default(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def emit_json(document: object) -> None:
    """Write ``document`` as one JSON document (2-space indent) followed by a newline."""
    sys.stdout.write(json.dumps(document, indent=2, default=_json_default, allow_nan=False))
    sys.stdout.write("\n")
    sys.stdout.flush()


def say(message: str) -> None:
    """One plain line of human output on stdout (no markup interpretation)."""
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def note(message: str) -> None:
    """One line of commentary on stderr (warnings, hints): never mixed into stdout."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def fmt_time(value: object) -> str:
    """Epoch seconds → local ``YYYY-MM-DD HH:MM:SS±HH:MM``; ``-`` for None."""
    if value is None or value == "":
        return "-"
    if isinstance(value, (int, float)) and math.isfinite(value):
        try:
            moment = datetime.fromtimestamp(float(value)).astimezone()
        except (OverflowError, OSError, ValueError):
            return str(value)
        return moment.isoformat(sep=" ", timespec="seconds")
    return str(value)


def fmt_duration(start: object, end: object) -> str:
    if not isinstance(start, (int, float)) or not isinstance(end, (int, float)):
        return "-"
    seconds = max(float(end) - float(start), 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def fmt_value(key: str, value: object) -> str:
    """A field value for a key/value listing: times formatted, JSON compact, None as ``-``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key.endswith("_at") and isinstance(value, (int, float)):
        return f"{fmt_time(value)}  ({value:.3f})"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=_json_default)
    return str(value)


def shorten(text: object, limit: int = 60) -> str:
    if text is None:
        return "-"
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def new_table(*columns: str, title: str | None = None) -> Table:
    """A table with the given headers; the first column (an id) never wraps."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for index, column in enumerate(columns):
        table.add_column(column, no_wrap=index == 0, overflow="fold")
    return table


def print_table(table: Table) -> None:
    """Print a table; off a terminal, without the padding rich leaves at line ends."""
    out = console()
    if out.is_terminal:
        out.print(table)
        return
    with out.capture() as captured:
        out.print(table)
    lines = [line.rstrip() for line in captured.get().splitlines()]
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def print_rows(
    columns: Sequence[str], rows: Iterable[Sequence[str]], *, empty: str, title: str | None = None
) -> None:
    """Print rows as a table, or the ``empty`` line when there are none."""
    materialised = list(rows)
    if not materialised:
        say(empty)
        return
    table = new_table(*columns, title=title)
    for row in materialised:
        table.add_row(*row)
    print_table(table)


def print_record(record: Mapping[str, Any], *, title: str | None = None) -> None:
    """Print a dict as a two-column FIELD / VALUE table, in the dict's key order."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("FIELD", no_wrap=True, style="bold")
    table.add_column("VALUE", overflow="fold")
    for key, value in record.items():
        table.add_row(key, fmt_value(key, value))
    print_table(table)
