"""``python -m studio_outbox deliver``: the delivery loop for producers that do not run Studio."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import shutil
import signal
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path

import aiosqlite

import studio_state
from studio_state import system_clock

from ._delivery import deliver
from ._exceptions import OutboxError
from ._queries import next_due_at
from ._schema import ensure_schema
from ._transport import validate_notify_template

PROG = "python -m studio_outbox"


class CliError(Exception):
    """A one-line error for stderr (exit code 1)."""


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Tools for a studio-outbox database without Studio."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "deliver",
        help="deliver due dispatches (loop until SIGINT/SIGTERM, or once)",
        description=(
            "Deliver the due dispatches of a database through an argv notify template. "
            "The first SIGINT/SIGTERM stops claiming and lets the sends in flight finish; "
            "a second one stops at once."
        ),
    )
    run.add_argument("--db", required=True, metavar="PATH", help="the SQLite database file")
    run.add_argument(
        "--template",
        required=True,
        metavar="JSON",
        help='argv list as JSON, e.g. \'["notify", "--to", "{deliver_to}", "{payload}"]\'',
    )
    run.add_argument("--once", action="store_true", help="run one delivery pass and exit")
    run.add_argument(
        "--interval",
        type=_positive_float,
        default=5.0,
        metavar="S",
        help="longest wait between passes in seconds (default 5)",
    )
    run.add_argument("--limit", type=_positive_int, default=100, help="rows per pass (100)")
    run.add_argument(
        "--concurrency", type=_positive_int, default=4, help="sends in flight at once (4)"
    )
    return parser


def _template(text: str) -> list[str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"--template: not valid JSON ({exc})") from None
    try:
        template = validate_notify_template(value)
    except OutboxError as exc:
        raise CliError(f"--template: {exc}") from None
    # Checked once here: a program that cannot be found would fail, and spend, every attempt.
    if shutil.which(template[0]) is None:
        raise CliError(f"--template: program {template[0]!r} is not an executable file or on PATH")
    return template


def _database(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.exists():
        raise CliError(f"--db: no such file: {path}")
    if not path.is_file():
        raise CliError(f"--db: not a regular file: {path}")
    return path


async def _open(path: Path) -> aiosqlite.Connection:
    try:
        conn = await studio_state.open_connection(path)
    except sqlite3.Error as exc:
        raise CliError(f"--db: cannot open {path}: {exc}") from None
    try:
        await ensure_schema(conn)
    except (sqlite3.Error, studio_state.StateError) as exc:
        await conn.close()
        raise CliError(f"--db: {path}: {exc}") from None
    return conn


def _summary(counts: dict[str, int]) -> str:
    return "deliver: " + " ".join(f"{key}={value}" for key, value in counts.items())


async def _run(args: argparse.Namespace) -> int:
    template = _template(args.template)
    path = _database(args.db)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    main = asyncio.current_task()
    assert main is not None

    def on_signal() -> None:
        if stop.is_set():
            main.cancel()  # second signal: stop now, killing the sends in flight
        else:
            stop.set()

    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:
        loop.add_signal_handler(signum, on_signal)
    conn = await _open(path)
    if not args.once:
        print(f"{PROG}: delivering from {path} (SIGINT/SIGTERM stops)", file=sys.stderr, flush=True)
    try:
        while not stop.is_set():
            counts = await deliver(
                conn,
                notify_template=template,
                limit=args.limit,
                concurrency=args.concurrency,
                stop=stop,
            )
            if args.once or any(counts.values()):
                print(_summary(counts), flush=True)
            if args.once:
                break
            # Rows still due after a full pass make the wait zero.
            due = await next_due_at(conn)
            wait = args.interval if due is None else min(args.interval, due - system_clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(wait, 0.0))
    except asyncio.CancelledError:
        pass
    finally:
        await conn.close()
        for signum in signals:
            loop.remove_signal_handler(signum)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m studio_outbox``; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(_run(args))
    except CliError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except (OutboxError, studio_state.StateError, sqlite3.Error, OSError) as exc:
        print(f"{PROG}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
