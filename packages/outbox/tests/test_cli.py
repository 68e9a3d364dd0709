from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_outbox
from studio_outbox import _cli as cli
from studio_state.testing import eventually


async def _run(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "studio_outbox",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _one_error_line(err: str, fragment: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("python -m studio_outbox: error: ")
    assert fragment in lines[0]


async def test_once_delivers_and_prints_counts(
    db_path: Path, conn: aiosqlite.Connection, recorder: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="ok")
    code, out, err = await _run(
        "deliver", "--db", str(db_path), "--template", json.dumps(recorder.template()), "--once"
    )
    assert code == 0, err
    assert out.strip() == "deliver: attempted=1 delivered=1 retried=0 dead_letter=0 expired=0"
    assert [p["dispatch_id"] for p in recorder.payloads()] == [dispatch_id]
    row = await studio_outbox.get_dispatch(conn, dispatch_id)
    assert row is not None and row["status"] == "delivered"


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The entry point in this process (errors and usage need no child)."""
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_once_on_a_database_without_the_outbox_creates_its_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plain.db"
    sqlite3.connect(path).close()
    code, out, err = _main(
        capsys, "deliver", "--db", str(path), "--template", '["/bin/true"]', "--once"
    )
    assert code == 0, err
    assert out.strip() == "deliver: attempted=0 delivered=0 retried=0 dead_letter=0 expired=0"
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = db.execute("SELECT name FROM sqlite_master").fetchall()
    assert ("dispatch_outbox",) in tables


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("not json", "--template: not valid JSON"),
        ('"notify"', "--template: notify_template: must be a JSON list"),
        ("[]", "must name at least the program"),
        ('["notify", 1]', "element 1 must be a string"),
        ('["/no/such/notifier", "{payload}"]', "'/no/such/notifier' is not an executable"),
        ('["no-such-notifier-on-path"]', "is not an executable file or on PATH"),
    ],
)
def test_bad_template_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], template: str, fragment: str
) -> None:
    path = tmp_path / "p.db"
    sqlite3.connect(path).close()
    code, _, err = _main(capsys, "deliver", "--db", str(path), "--template", template, "--once")
    assert code == 1
    _one_error_line(err, fragment)


def test_bad_database_paths_are_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _main(
        capsys, "deliver", "--db", str(tmp_path / "missing.db"), "--template", '["/bin/true"]'
    )
    assert code == 1
    _one_error_line(err, "--db: no such file")
    assert not (tmp_path / "missing.db").exists()
    code, _, err = _main(capsys, "deliver", "--db", str(tmp_path), "--template", '["/bin/true"]')
    assert code == 1
    _one_error_line(err, "not a regular file")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite " * 100)
    code, _, err = _main(capsys, "deliver", "--db", str(junk), "--template", '["/bin/true"]')
    assert code == 1
    _one_error_line(err, "file is not a database")


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "p.db")
    for args in ((), ("deliver",), ("deliver", "--db", db), ("send",)):
        code, _, err = _main(capsys, *args)
        assert code == 2, args
        assert "usage:" in err and "Traceback" not in err
    code, _, err = _main(capsys, "deliver", "--db", db, "--template", "[]", "--interval", "-1")
    assert code == 2 and "--interval" in err


async def test_bad_arguments_from_a_real_process_are_one_line(tmp_path: Path) -> None:
    code, _, err = await _run("deliver", "--db", str(tmp_path / "x.db"), "--template", "{")
    assert code == 1
    _one_error_line(err, "--template: not valid JSON")
    code, _, err = await _run("deliver")
    assert code == 2 and "usage:" in err


async def _start_loop(db_path: Path, recorder: Any) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "studio_outbox",
        "deliver",
        "--db",
        str(db_path),
        "--template",
        json.dumps(recorder.template()),
        "--interval",
        "0.2",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    line = await asyncio.wait_for(proc.stderr.readline(), 60)
    assert b"delivering from" in line  # signal handlers are installed from here on
    return proc


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_loop_picks_up_new_rows_and_stops_cleanly_on_a_signal(
    db_path: Path, conn: aiosqlite.Connection, recorder: Any, signum: int
) -> None:
    proc = await _start_loop(db_path, recorder)
    dispatch_id = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="ok")

    async def delivered() -> bool:
        row = await studio_outbox.get_dispatch(conn, dispatch_id)
        return row is not None and row["status"] == "delivered"

    await eventually(delivered, what="the loop to deliver a row enqueued by another process")
    proc.send_signal(signum)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert "Traceback" not in err.decode()
    assert "delivered=1" in out.decode()


async def test_first_signal_lets_the_send_in_flight_finish(
    db_path: Path, conn: aiosqlite.Connection, recorder: Any
) -> None:
    proc = await _start_loop(db_path, recorder)
    dispatch_id = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="sleep:1.5")

    async def delivering() -> bool:
        row = await studio_outbox.get_dispatch(conn, dispatch_id)
        return row is not None and row["status"] == "delivering"

    await eventually(delivering, what="the send to start")
    proc.send_signal(signal.SIGTERM)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    row = await studio_outbox.get_dispatch(conn, dispatch_id)
    assert row is not None and row["status"] == "delivered"  # recorded, not abandoned
    assert len(recorder.sends()) == 1


async def test_second_signal_stops_at_once(
    db_path: Path, conn: aiosqlite.Connection, recorder: Any
) -> None:
    proc = await _start_loop(db_path, recorder)
    dispatch_id = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="sleep:30")

    async def delivering() -> bool:
        row = await studio_outbox.get_dispatch(conn, dispatch_id)
        return row is not None and row["status"] == "delivering"

    await eventually(delivering, what="the send to start")
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    await asyncio.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert time.monotonic() - started < 20  # did not wait for the 30 s send
    row = await studio_outbox.get_dispatch(conn, dispatch_id)
    assert row is not None and row["status"] == "delivering"  # its lease lapses later
