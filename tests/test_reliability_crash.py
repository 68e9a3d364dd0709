"""kill -9 of a real `studio serve` at the worst moments, then a restart on the same database.

Each test starts the real server (``python -m studio_cli serve``), gets work in flight whose
child process tells the test it started (a marker file with its pid and its grandchild's),
SIGKILLs the server, starts it again and checks the rows directly in SQLite: no lost row, no
run left ``running``, no occurrence fired twice, the orphaned process group terminated, a
dispatch whose sender died redelivered once its claim lease lapsed.
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    KILL_PARENT_SH,
    MARKER_CHILD,
    assert_consistent,
    count,
    db_rows,
    read_marker,
    write_script,
)

from studio_state.testing import pid_alive, wait_for

pytestmark = pytest.mark.slow

ORPHAN_GONE_SECONDS = 20.0  # reconciliation: SIGTERM, up to 5 s grace, SIGKILL; then slack


def _schedule(name: str, argv: list[str], cwd: Path, **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": name,
        "trigger_type": "interval",
        "interval_sec": 1,
        "action_kind": "command",
        "action_command": argv[0],
        "action_command_args": argv[1:],
        "action_cwd": str(cwd),
        "overlap_policy": "skip",
        "missed_fire_policy": "run_once",
    }
    data.update(fields)
    return data


def _orphans_gone(info: dict[str, Any]) -> bool:
    return not pid_alive(int(info["pid"])) and not pid_alive(int(info["grandchild"]))


def _stop_and_check(server: Any) -> dict[str, int]:
    """Graceful stop, then the invariants (nothing running, each occurrence once)."""
    # uvicorn re-raises the SIGTERM it handled, so a clean stop may end "killed by SIGTERM"
    assert server.stop() in (0, -15), server.log()
    figures = assert_consistent(server.db)
    count("rows_checked", figures["runs"] + figures["invocations"])
    assert "Traceback" not in server.all_logs()
    return figures


def test_kill9_during_a_scheduled_run(studio_process: Any, reap_pids: list[int]) -> None:
    server = studio_process()
    child = write_script(server.base, "child.py", MARKER_CHILD)
    marker = server.base / "marker.json"
    server.start()
    created = server.request(
        "POST",
        "/api/schedules",
        json=_schedule(
            "crash-a", ["python3", str(child), str(marker), "sleep"], server.base, max_runs=3
        ),
    )
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    info = wait_for(lambda: read_marker(marker), what="the child started")
    reap_pids += [info["pid"], info["grandchild"]]
    run = wait_for(
        lambda: server.rows(
            "SELECT * FROM schedule_runs WHERE schedule_id = ? AND child_pid = ?",
            (sid, info["pid"]),
        ),
        what="the run recorded its child",
    )[0]
    assert run["status"] == "running"

    server.kill9()
    assert pid_alive(info["pid"]) and pid_alive(info["grandchild"])  # orphans really exist

    server.restart()
    wait_for(lambda: _orphans_gone(info), timeout=ORPHAN_GONE_SECONDS, what="orphans gone")
    after = server.rows("SELECT * FROM schedule_runs WHERE id = ?", (run["id"],))[0]
    assert after["status"] == "failed"
    assert after["status_reason_code"] == "run.failed.daemon_restart"
    invocation = server.rows("SELECT * FROM invocations WHERE id = ?", (run["invocation_id"],))
    assert invocation[0]["status"] == "failed"
    # The schedule goes on (its later runs exit at once) until max_runs disables it.
    wait_for(
        lambda: (
            server.rows("SELECT enabled FROM schedules WHERE id = ?", (sid,))[0]["enabled"] == 0
        ),
        what="max_runs reached",
    )
    _stop_and_check(server)
    fired = server.rows(
        "SELECT * FROM schedule_runs WHERE schedule_id = ? AND status != 'skipped'", (sid,)
    )
    assert len(fired) == 3
    assert sum(1 for r in fired if r["id"] == run["id"]) == 1  # never re-fired


@pytest.mark.parametrize("how", ["server-killed", "child-kills-server"])
def test_kill9_during_an_adhoc_run(studio_process: Any, reap_pids: list[int], how: str) -> None:
    server = studio_process()
    marker = server.base / "marker.json"
    if how == "server-killed":
        script = write_script(server.base, "child.py", MARKER_CHILD)
        argv = ["python3", str(script), str(marker), "sleep"]
    else:  # dies before the worker records the child's pid
        script = write_script(server.base, "child.sh", KILL_PARENT_SH)
        argv = ["sh", str(script), str(marker)]
    server.start()
    queued = server.request(
        "POST",
        "/api/runs",
        json={
            "action_kind": "command",
            "action_command": argv[0],
            "action_command_args": argv[1:],
            "action_cwd": str(server.base),
        },
    )
    assert queued.status_code == 202, queued.text
    run_id = queued.json()["run_id"]
    info = wait_for(lambda: read_marker(marker), what="the child started")
    reap_pids += [info["pid"], info["grandchild"]]
    if how == "server-killed":
        wait_for(
            lambda: server.rows(
                "SELECT 1 FROM schedule_runs WHERE id = ? AND child_pid = ?",
                (run_id, info["pid"]),
            ),
            what="the run recorded its child",
        )
        server.kill9()
    else:
        assert server.proc is not None
        server.proc.wait(timeout=60)
        count("crashes_survived")
    assert pid_alive(info["pid"])

    server.restart()
    wait_for(lambda: _orphans_gone(info), timeout=ORPHAN_GONE_SECONDS, what="orphans gone")
    row = wait_for(
        lambda: [
            r
            for r in server.rows("SELECT * FROM schedule_runs WHERE id = ?", (run_id,))
            if r["status"] != "running"
        ],
        what="the ad-hoc run left running",
    )[0]
    assert row["status"] == "failed"
    assert row["status_reason_code"] == "run.failed.daemon_restart"  # launched: not re-run
    _stop_and_check(server)
    assert read_marker(marker)["pid"] == info["pid"]  # the child ran exactly once


NOTIFY = """
import json, os, sys, time
log, payload = sys.argv[1], json.loads(sys.argv[2])
with open(log, "a") as handle:
    handle.write(json.dumps({"pid": os.getpid(), "attempt": payload["attempt"],
                             "id": payload["dispatch_id"], "at": time.time()}) + "\\n")
if payload["attempt"] == 1:
    time.sleep(300)  # the first send hangs: the server is killed while it is in flight
"""


def test_kill9_between_claim_and_outcome_of_a_delivery(
    studio_process: Any, reap_pids: list[int]
) -> None:
    import asyncio

    import studio_outbox
    import studio_state

    base_env: dict[str, str] = {}
    server = studio_process(env=base_env)
    notify = write_script(server.base, "notify.py", NOTIFY)
    sends = server.base / "sends.jsonl"
    server.env["LIONAGI_STUDIO_NOTIFY_TEMPLATE"] = json.dumps(
        ["python3", str(notify), str(sends), "{payload}", "{deliver_to}"]
    )
    server.start()

    async def produce() -> str:
        async with studio_state.connect(server.db) as conn:
            return await studio_outbox.enqueue_dispatch(
                conn, kind="run.finished", deliver_to="ops", body={"n": 1}, dedup_key="crash-b"
            )

    dispatch_id = asyncio.run(produce())

    def sent() -> list[dict[str, Any]]:
        try:
            return [json.loads(line) for line in sends.read_text().splitlines()]
        except OSError:
            return []

    first = wait_for(sent, what="the first send started")[0]
    reap_pids.append(first["pid"])
    claimed = server.rows("SELECT * FROM dispatch_outbox WHERE id = ?", (dispatch_id,))[0]
    assert claimed["status"] == "delivering" and claimed["attempt"] == 1
    lease_until = claimed["next_attempt_at"]

    server.kill9()
    server.restart()
    row = wait_for(
        lambda: [
            r
            for r in server.rows("SELECT * FROM dispatch_outbox WHERE id = ?", (dispatch_id,))
            if r["status"] == "delivered"
        ],
        timeout=60,
        what="redelivered after the lease",
    )[0]
    attempts = sent()
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[1]["at"] >= lease_until - 0.5  # not before the dead sender's lease lapsed
    assert row["attempt"] == 2
    wait_for(
        lambda: not pid_alive(first["pid"]),
        timeout=ORPHAN_GONE_SECONDS,
        what="the dead sender's transport terminated",
    )
    transitions = [
        t["reason_code"]
        for t in server.rows(
            "SELECT reason_code FROM status_transitions WHERE entity_id = ? "
            "ORDER BY created_at, rowid",
            (dispatch_id,),
        )
    ]
    assert transitions == [
        "dispatch.pending.enqueued",
        "dispatch.delivering.claimed",
        "dispatch.delivering.claimed",
        "dispatch.delivered.transport_ok",
    ]
    _stop_and_check(server)


@pytest.mark.parametrize("child_kind", ["python", "sh"])
def test_kill9_mid_fire_by_the_child_itself(
    studio_process: Any, reap_pids: list[int], child_kind: str
) -> None:
    """The child SIGKILLs the server the moment it starts: the fire's bookkeeping after exec
    (pid record, terminal write) never happens."""
    server = studio_process()
    marker = server.base / "marker.json"
    if child_kind == "python":
        script = write_script(server.base, "child.py", MARKER_CHILD)
        argv = ["python3", str(script), str(marker), "kill-parent"]
    else:
        script = write_script(server.base, "child.sh", KILL_PARENT_SH)
        argv = ["sh", str(script), str(marker)]
    server.start()
    created = server.request(
        "POST", "/api/schedules", json=_schedule("crash-d", argv, server.base, max_runs=1)
    )
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    assert server.proc is not None
    server.proc.wait(timeout=60)  # killed by its child
    count("crashes_survived")
    info = wait_for(lambda: read_marker(marker), what="the child wrote its marker")
    reap_pids += [info["pid"], info["grandchild"]]

    server.restart()
    wait_for(lambda: _orphans_gone(info), timeout=ORPHAN_GONE_SECONDS, what="orphans gone")
    runs = server.rows("SELECT * FROM schedule_runs WHERE schedule_id = ?", (sid,))
    fired = [r for r in runs if r["status"] != "skipped"]
    assert len(fired) == 1, runs
    assert fired[0]["status"] == "failed"
    assert fired[0]["status_reason_code"] == "run.failed.daemon_restart"
    _stop_and_check(server)


def test_kill9_storm_loses_no_acknowledged_row(studio_process: Any, reap_pids: list[int]) -> None:
    """Repeated kill -9 at random moments while schedules fire every second and a client
    keeps queueing runs: every acknowledged row survives, nothing stays running, no
    occurrence fires twice."""
    rng = random.Random(70)
    server = studio_process()
    quick = write_script(server.base, "quick.py", "import time\ntime.sleep(0.2)\n")
    server.start()
    for n in range(3):
        created = server.request(
            "POST",
            "/api/schedules",
            json=_schedule(
                f"storm-{n}", ["python3", str(quick)], server.base, overlap_policy="allow"
            ),
        )
        assert created.status_code == 201, created.text
    acknowledged: list[str] = []
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                answer = server.request(
                    "POST",
                    "/api/runs",
                    json={
                        "action_kind": "command",
                        "action_command": "python3",
                        "action_command_args": [str(quick)],
                        "action_cwd": str(server.base),
                    },
                    timeout=5,
                )
            except Exception:
                time.sleep(0.05)  # the server is down: the request was never acknowledged
                continue
            if answer.status_code == 202:
                acknowledged.append(answer.json()["run_id"])
            time.sleep(0.1)

    enqueued: list[str] = []

    def producer() -> None:
        """Another process's producer writing to the outbox the whole time (paused delivery)."""
        import asyncio

        import studio_outbox
        import studio_state

        async def run() -> None:
            async with studio_state.connect(server.db) as conn:
                n = 0
                while not stop.is_set():
                    n += 1
                    enqueued.append(
                        await studio_outbox.enqueue_dispatch(
                            conn,
                            kind="storm",
                            deliver_to="ops",
                            body={"n": n},
                            dedup_key=f"storm-{n}",
                        )
                    )
                    await asyncio.sleep(0.01)

        asyncio.run(run())

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    producing = threading.Thread(target=producer, daemon=True)
    producing.start()
    crashes = 4
    try:
        for _ in range(crashes):
            time.sleep(rng.uniform(0.5, 2.5))
            server.kill9()
            server.restart()
        time.sleep(2.0)
    finally:
        stop.set()
        thread.join(timeout=30)
        producing.join(timeout=30)
    # Let the ad-hoc queue drain, then stop gracefully and check everything.
    wait_for(
        lambda: (
            not server.rows(
                "SELECT 1 FROM schedule_runs WHERE status IN ('queued', 'running') "
                "AND schedule_id IS NULL"
            )
        ),
        timeout=60,
        what="the ad-hoc queue drained",
    )
    figures = _stop_and_check(server)
    stored = {r["id"] for r in db_rows(server.db, "SELECT id FROM schedule_runs")}
    lost = [run_id for run_id in acknowledged if run_id not in stored]
    dispatches = {r["id"] for r in db_rows(server.db, "SELECT id FROM dispatch_outbox")}
    lost += [d for d in enqueued if d not in dispatches]
    assert len(dispatches) == len(set(enqueued))  # and nothing that was not acknowledged
    count("rows_acknowledged", len(acknowledged) + len(enqueued))
    count("rows_lost", len(lost))
    assert acknowledged, "the client never got an answer"
    assert lost == []
    assert figures["occurrences"] > 0
