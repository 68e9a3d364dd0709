"""Several processes on one database: dedup across producers, the CLI beside a busy server,
and the single-writer engine lock."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import count, db_rows, db_value, write_script

pytestmark = pytest.mark.slow

PRODUCER = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import studio_outbox, studio_state

    db, start_at, order = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    keys = [f"key-{n}" for n in range(int(sys.argv[4]))]
    if order == "reversed":
        keys.reverse()

    async def main():
        async with studio_state.connect(db) as conn:
            await studio_outbox.ensure_schema(conn)
            time.sleep(max(0.0, start_at - time.time()))  # both start together
            ids = {}
            for key in keys:
                ids[key] = await studio_outbox.enqueue_dispatch(
                    conn, kind="k", deliver_to="ops", body={"key": key}, dedup_key=key
                )
        print(json.dumps(ids))

    asyncio.run(main())
    """
)


def _studio(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "studio_cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def test_two_processes_enqueue_the_same_dedup_keys_once(
    studio_process: Any, tmp_path: Path
) -> None:
    """Two producer processes race on 150 dedup keys while the server ticks beside them:
    one row per key, both producers get the same id for it, one enqueue transition each."""
    server = studio_process()
    server.start()  # a third writer on the database (its tick), delivery paused
    producer = write_script(tmp_path, "producer.py", PRODUCER)
    keys = 150
    start_at = time.time() + 1.5
    procs = [
        subprocess.Popen(
            [sys.executable, str(producer), str(server.db), str(start_at), order, str(keys)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for order in ("forward", "reversed")
    ]
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "locked" not in err
        answers.append(json.loads(out))
    assert answers[0] == answers[1]
    assert len(set(answers[0].values())) == keys
    rows = db_rows(server.db, "SELECT id, dedup_key FROM dispatch_outbox")
    assert {r["dedup_key"]: r["id"] for r in rows} == answers[0]
    enqueued = db_value(
        server.db,
        "SELECT COUNT(*) FROM status_transitions WHERE entity_type = 'dispatch' "
        "AND reason_code = 'dispatch.pending.enqueued'",
    )
    assert enqueued == keys
    count("inputs_tried", 2 * keys)
    server.stop()


def test_cli_writes_while_the_server_ticks_never_see_a_locked_database(
    studio_process: Any, tmp_path: Path
) -> None:
    """Schedules firing every second, a producer writing the outbox, and 12 CLI writes from
    three concurrent workers: every CLI command succeeds, none reports a locked database."""
    server = studio_process()
    quick = write_script(server.base, "quick.py", "import time\ntime.sleep(0.1)\n")
    server.start()
    for n in range(4):
        answer = server.request(
            "POST",
            "/api/schedules",
            json={
                "name": f"busy-{n}",
                "trigger_type": "interval",
                "interval_sec": 1,
                "action_kind": "command",
                "action_command": "python3",
                "action_command_args": [str(quick)],
                "action_cwd": str(server.base),
                "overlap_policy": "allow",
            },
        )
        assert answer.status_code == 201, answer.text
    producer = write_script(tmp_path, "producer.py", PRODUCER)
    background = subprocess.Popen(
        [sys.executable, str(producer), str(server.db), "0", "forward", "3000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = dict(server.env)
    db = str(server.db)

    def worker(w: int) -> list[subprocess.CompletedProcess[str]]:
        results = []
        for n in range(2):
            name = f"cli-{w}-{n}"
            results.append(
                _studio(
                    "schedule",
                    "create",
                    name,
                    "--interval",
                    "1",
                    "--command",
                    "python3",
                    "--command-arg",
                    str(quick),
                    "--cwd",
                    str(server.base),
                    "--overlap",
                    "allow",
                    "--db",
                    db,
                    "--json",
                    env=env,
                    cwd=server.base,
                )
            )
            results.append(
                _studio("schedule", "disable", name, "--db", db, "--json", env=env, cwd=server.base)
            )
        return results

    try:
        with ThreadPoolExecutor(3) as pool:
            results = [r for batch in pool.map(worker, range(3)) for r in batch]
    finally:
        background.kill()
        background.wait()
    assert len(results) == 12
    for result in results:
        assert result.returncode == 0, (result.args, result.stderr)
        assert "locked" not in result.stderr.lower() and "busy" not in result.stderr.lower()
    count("inputs_tried", len(results))
    fired = db_value(
        server.db, "SELECT COUNT(*) FROM schedule_runs WHERE status IN ('completed', 'running')"
    )
    assert fired > 0  # the server really was firing meanwhile
    created = db_rows(server.db, "SELECT name, enabled FROM schedules WHERE name LIKE 'cli-%'")
    assert len(created) == 6 and all(r["enabled"] == 0 for r in created)
    assert server.health()["status"] == "ok"
    server.stop()
    assert "database is locked" not in server.all_logs()


def test_cli_waits_out_a_writer_that_holds_the_lock(studio_process: Any, tmp_path: Path) -> None:
    """Another process holds the write lock for 2 s: the CLI waits (busy timeout) and succeeds."""
    server = studio_process()
    server.start()
    holder = write_script(
        tmp_path,
        "holder.py",
        textwrap.dedent(
            """
            import sqlite3, sys, time
            conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
            conn.execute("BEGIN IMMEDIATE")
            print("held", flush=True)
            time.sleep(2.0)
            conn.execute("COMMIT")
            """
        ),
    )
    proc = subprocess.Popen(
        [sys.executable, str(holder), str(server.db)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    started = time.monotonic()
    result = _studio(
        "schedule",
        "create",
        "waited",
        "--interval",
        "60",
        "--command",
        "python3",
        "--command-arg",
        "x",
        "--cwd",
        str(server.base),
        "--db",
        str(server.db),
        "--json",
        env=dict(server.env),
        cwd=server.base,
    )
    assert proc.wait(timeout=30) == 0
    proc.stdout.close()
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started >= 1.0  # it really waited for the holder
    assert db_value(server.db, "SELECT COUNT(*) FROM schedules WHERE name = 'waited'") == 1
    assert server.health()["status"] == "ok"  # the engine rode out the held lock too
    server.stop()


def test_a_second_engine_on_the_same_database_refuses_to_start(studio_process: Any) -> None:
    first = studio_process()
    first.start()
    second = studio_process(db=first.db)
    proc = second.spawn()
    assert proc.wait(timeout=60) == 1
    log = second.log()
    lines = [line for line in log.splitlines() if "cannot start" in line or "error:" in line]
    assert any(
        re.search(rf"another scheduler engine \(pid {first.pid}\) holds .*engine\.lock", line)
        for line in lines
    ), log
    assert "only one engine may run per database" in log
    assert "Traceback" not in log
    assert first.health()["status"] == "ok"  # the holder is untouched
    # The lock dies with its holder (flock, not a stale pid file): after kill -9 of the first,
    # the second starts on the same database.
    first.kill9()
    second.start()
    assert second.health()["status"] == "ok"
    second.stop()
