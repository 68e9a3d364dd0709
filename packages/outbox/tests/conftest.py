from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_outbox
import studio_state
from studio_outbox import DispatchEnvelope, TransportResult
from studio_state.testing import clean_environment  # noqa: F401  (autouse fixture)

# A real transport program. It appends one JSON line per send to the file named by its first
# argument ({"argv": [...the rest...], "stdin": "...", "pid": n}), then behaves according to
# the destination it finds in its arguments: "fail:<text>" exits 3 printing <text> on stderr,
# "sleep:<s>" sleeps, "hang" sleeps for a minute (and starts a grandchild that does the same),
# "window:<s>" records start and end times around a sleep of <s> seconds, "detach" exits 0
# leaving a grandchild that holds stderr open, "detachfail:<text>" does that and fails.
RECORDER = textwrap.dedent(
    """
    import json, os, sys, time, subprocess
    out, rest = sys.argv[1], sys.argv[2:]
    data = sys.stdin.read()
    start = time.time()
    dest = next((a for a in rest if a.split(":")[0] in
                 ("fail", "sleep", "hang", "window", "ok", "detach", "detachfail")), "")
    if dest.startswith("sleep:") or dest.startswith("window:"):
        time.sleep(float(dest.split(":", 1)[1]))
    if dest == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        with open(out + ".grandchild", "w") as fh:
            fh.write(str(child.pid))
    line = json.dumps({"argv": rest, "stdin": data, "pid": os.getpid(),
                       "start": start, "end": time.time()})
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, (line + "\\n").encode())
    os.close(fd)
    if dest == "hang":
        time.sleep(60)
    if dest.startswith("detach"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        with open(out + ".grandchild", "w") as fh:
            fh.write(str(child.pid))
    if dest.startswith("detachfail:"):
        sys.stderr.write(dest.split(":", 1)[1])
        sys.exit(4)
    if dest.startswith("fail:"):
        sys.stderr.write(dest.split(":", 1)[1])
        sys.exit(3)
    """
)


@dataclass
class Recorder:
    """The recorder program and the file it writes."""

    script: Path
    log: Path

    def template(self, *elements: str) -> list[str]:
        """argv template running the recorder; ``elements`` default to deliver_to + payload."""
        return [
            sys.executable,
            "-S",
            str(self.script),
            str(self.log),
            *(elements or ("{deliver_to}", "{payload}")),
        ]

    def sends(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def payloads(self) -> list[dict[str, Any]]:
        """The payload of every send (from argv when present, else stdin)."""
        out = []
        for send in self.sends():
            text = send["stdin"] or send["argv"][-1]
            out.append(json.loads(text))
        return out


@pytest.fixture
def recorder(tmp_path: Path) -> Recorder:
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER)
    return Recorder(script, tmp_path / "sends.jsonl")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "producer.db"


@pytest.fixture
def clock() -> studio_state.ManualClock:
    return studio_state.ManualClock(1_700_000_000.0)


@pytest.fixture
async def conn(db_path: Path) -> AsyncIterator[aiosqlite.Connection]:
    async with studio_state.connect(db_path) as connection:
        await studio_outbox.ensure_schema(connection)
        yield connection


@dataclass
class InProcessTransport:
    """A Transport implemented in the test process, for tests that steer a send precisely.

    ``behaviour(envelope)`` may be async; it returns a TransportResult (default: success).
    """

    behaviour: Callable[[DispatchEnvelope], Any] | None = None
    sent: list[DispatchEnvelope] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    async def send(self, envelope: DispatchEnvelope) -> TransportResult:
        self.sent.append(envelope)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            result = self.behaviour(envelope) if self.behaviour else None
            if asyncio.iscoroutine(result):
                result = await result
            return result if result is not None else TransportResult.success()
        finally:
            self.in_flight -= 1


class Probe:
    """Reads the database behind the public API's back (raw rows, history) for assertions."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn

    async def row(self, dispatch_id: str) -> dict[str, Any]:
        rows = list(
            await self.conn.execute_fetchall(
                "SELECT * FROM dispatch_outbox WHERE id = ?", (dispatch_id,)
            )
        )
        assert len(rows) == 1, rows
        return dict(rows[0])

    async def history(self, dispatch_id: str) -> list[dict[str, Any]]:
        rows = await self.conn.execute_fetchall(
            "SELECT previous_status, status, reason_code, reason_summary, actor, created_at "
            "FROM status_transitions WHERE entity_type = 'dispatch' AND entity_id = ? "
            "ORDER BY created_at, rowid",
            (dispatch_id,),
        )
        return [dict(r) for r in rows]

    async def reasons(self, dispatch_id: str) -> list[str]:
        return [h["reason_code"] for h in await self.history(dispatch_id)]

    async def snapshot(self) -> tuple[list[Any], list[Any]]:
        rows = await self.conn.execute_fetchall("SELECT * FROM dispatch_outbox ORDER BY id")
        trans = await self.conn.execute_fetchall("SELECT * FROM status_transitions ORDER BY id")
        return [dict(r) for r in rows], [dict(r) for r in trans]

    async def count(self, table: str = "dispatch_outbox") -> int:
        rows = await self.conn.execute_fetchall(f"SELECT count(*) AS n FROM {table}")
        return int(next(iter(rows))["n"])

    async def set(self, dispatch_id: str, **fields: Any) -> None:
        """Force columns (to stage states such as a lapsed lease of a dead process)."""
        assignments = ", ".join(f"{name} = ?" for name in fields)
        await self.conn.execute(
            f"UPDATE dispatch_outbox SET {assignments} WHERE id = ?",
            (*fields.values(), dispatch_id),
        )


@pytest.fixture
def probe(conn: aiosqlite.Connection) -> Probe:
    return Probe(conn)


@pytest.fixture
def transport_factory() -> type[InProcessTransport]:
    return InProcessTransport


# Another process that takes the database's write lock (BEGIN IMMEDIATE), says "locked" on
# stdout, holds the lock for argv[2] seconds, then commits and exits.
LOCKER = (
    "import sqlite3, sys, time\n"
    "conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)\n"
    "conn.execute('BEGIN IMMEDIATE')\n"
    "print('locked', flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n"
    "conn.execute('COMMIT')\n"
)


async def hold_write_lock(path: Path, seconds: float) -> asyncio.subprocess.Process:
    """Start a real second process holding ``path``'s write lock for ``seconds``.

    Returns once the lock is held; the caller awaits ``proc.wait()`` to see it released.
    """
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-S",
        "-c",
        LOCKER,
        str(path),
        str(seconds),
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert line.strip() == b"locked", line
    return proc


@pytest.fixture
def write_lock() -> Callable[[Path, float], Any]:
    """:func:`hold_write_lock` (a real second process holding the write lock)."""
    return hold_write_lock
