"""``python -m studio_outbox``: the outbox's commands for producers that do not run Studio.

``deliver`` runs the delivery loop; ``enqueue``, ``list``, ``show``, ``ack``, ``retry`` and
``purge`` take the flags of ``studio dispatch``. Every error is one line on stderr and exit
code 1 (2 for a usage error), never a traceback.
"""

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
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import aiosqlite

import studio_state
from studio_state import SYNCHRONOUS_MODES, system_clock

from . import _cli_commands as commands
from ._constants import DEFAULT_MAX_ATTEMPTS, DISPATCH_STATUSES
from ._delivery import deliver
from ._drive import is_busy
from ._exceptions import CliError, OutboxError
from ._queries import next_due_at
from ._schema import ensure_schema
from ._transport import validate_notify_template

PROG = "python -m studio_outbox"


_MAX_COUNT = 2**31 - 1
_BUSY_WAIT_SECONDS = 0.5
_IDLE_WAIT_SECONDS = 1.0


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


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= _MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be between 0 and {_MAX_COUNT}, got {text!r}")
    return value


def _common(command: argparse.ArgumentParser) -> None:
    command.add_argument("--db", required=True, metavar="PATH", help="the SQLite database file")
    command.add_argument("--json", action="store_true", help="print JSON instead of text")
    command.add_argument(
        "--synchronous",
        choices=SYNCHRONOUS_MODES,
        default="full",
        help="full (default: a commit survives power loss) or normal (fewer fsyncs)",
    )


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
    _common(run)
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
    enqueue = commands.add_parser("enqueue", help="add a dispatch")
    _common(enqueue)
    enqueue.add_argument("--kind", required=True, help="what happened, e.g. job.failed")
    enqueue.add_argument("--to", required=True, metavar="DEST", help="the destination")
    enqueue.add_argument("--body", metavar="JSON", help="a JSON object sent as the body")
    enqueue.add_argument("--dedup-key", metavar="KEY", help="enqueue at most once per key")
    enqueue.add_argument("--ack", action="store_true", help="resend until acknowledged")
    enqueue.add_argument(
        "--max-attempts", type=_positive_int, default=DEFAULT_MAX_ATTEMPTS, metavar="N"
    )
    enqueue.add_argument("--expires-at", type=_finite_float, metavar="EPOCH")
    listing = commands.add_parser("list", help="list dispatches, newest first")
    _common(listing)
    listing.add_argument("--status", choices=DISPATCH_STATUSES)
    listing.add_argument("--kind")
    listing.add_argument("--limit", type=_positive_int, default=50, help="rows (50)")
    listing.add_argument("--offset", type=_count, default=0)
    for name, text in (
        ("show", "show one dispatch (never its ack token)"),
        ("ack", "acknowledge a dispatch with its TOKEN"),
        ("retry", "send a dead-lettered or expired dispatch again"),
        ("purge", "delete one dispatch (refused while it is being sent)"),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument("dispatch_id", metavar="ID")
        if name == "ack":
            command.add_argument("token", metavar="TOKEN")
        if name == "purge":
            command.add_argument("--yes", "-y", action="store_true", help="do not ask")
        _common(command)
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


async def _open(path: Path, synchronous: str) -> aiosqlite.Connection:
    try:
        conn = await studio_state.open_connection(path, synchronous=synchronous)
    except sqlite3.Error as exc:
        raise CliError(f"--db: cannot open {path}: {exc}") from None
    try:
        while True:
            try:
                await ensure_schema(conn)
                break
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                # Another process holds the write lock for long: wait for it.
                await asyncio.sleep(_BUSY_WAIT_SECONDS)
    except (sqlite3.Error, studio_state.StateError) as exc:
        await conn.close()
        raise CliError(f"--db: {path}: {exc}") from None
    except BaseException:
        await conn.close()
        raise
    return conn


def _summary(counts: dict[str, int], as_json: bool) -> str:
    if as_json:
        return json.dumps(counts)
    return "deliver: " + " ".join(f"{key}={value}" for key, value in counts.items())


async def _deliver(args: argparse.Namespace) -> int:
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
    conn: aiosqlite.Connection | None = None
    try:
        conn = await _open(path, args.synchronous)
        if not args.once:
            print(
                f"{PROG}: delivering from {path} (SIGINT/SIGTERM stops)",
                file=sys.stderr,
                flush=True,
            )
        while not stop.is_set():
            counts = await deliver(
                conn,
                notify_template=template,
                limit=args.limit,
                concurrency=args.concurrency,
                stop=stop,
            )
            if args.once or any(counts.values()):
                print(_summary(counts, args.json), flush=True)
            if args.once:
                break
            # Rows still due after a full pass make the wait short; a pass that found only
            # rows another live sender still holds waits a little rather than spinning.
            due = await next_due_at(conn)
            wait = args.interval if due is None else min(args.interval, due - system_clock())
            if not any(counts.values()):
                wait = max(wait, min(args.interval, _IDLE_WAIT_SECONDS))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(wait, 0.0))
    except asyncio.CancelledError:
        pass
    finally:
        if conn is not None:
            await conn.close()
        for signum in signals:
            loop.remove_signal_handler(signum)
    return 0


_COMMANDS: dict[str, Callable[[aiosqlite.Connection, argparse.Namespace], Awaitable[None]]] = {
    "enqueue": commands.enqueue,
    "list": commands.list_,
    "show": commands.show,
    "ack": commands.ack,
    "retry": commands.retry,
    "purge": commands.purge,
}


async def _run(args: argparse.Namespace) -> int:
    if args.command == "deliver":
        return await _deliver(args)
    conn = await _open(_database(args.db), args.synchronous)
    try:
        await _COMMANDS[args.command](conn, args)
    finally:
        await conn.close()
    return 0


def _message(exc: BaseException) -> str:
    if isinstance(exc, CliError | OutboxError):
        return str(exc)
    if isinstance(exc, sqlite3.Error) and is_busy(exc):
        return "the database is locked by another process; try again"
    if isinstance(exc, sqlite3.Error):
        return f"database error: {exc}"
    return f"{type(exc).__name__}: {exc}"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m studio_outbox``; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (OutboxError, studio_state.StateError, sqlite3.Error, OSError) as exc:
        print(f"{PROG}: error: {_message(exc)}".replace("\n", " "), file=sys.stderr)
        return 1
