"""Scheduled fires run by any node: three real ``studio serve`` processes on one throwaway
PostgreSQL database (``LIONAGI_STUDIO_SCHEDULED_ON_ANY_NODE`` unset: on, for PostgreSQL).

The leader admits every fire and queues it; the workers of all three nodes claim them. The
fires run on more than one node, no occurrence fires twice, the global cap holds across the
nodes (counted in the database), and ``kill -9`` of a node that is running a fire fails that
run (its lease's owner is gone), terminates its child and frees its slot; every run ends.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from studio_state.testing import db_rows, load_beside, pid_alive

_nodes = load_beside(__file__, "test_nodes_pg.py", "studio_test_nodes_pg")
nodes, wait_until, schedule = _nodes.nodes, _nodes.wait_until, _nodes.schedule
CAP, TERMINAL = _nodes.CAP, _nodes.TERMINAL

SCHEDULES = 30


def _runs(dsn: str) -> list[dict[str, Any]]:
    return db_rows(
        dsn,
        "SELECT id, schedule_id, status, status_reason_code, trigger_context, child_pid, "
        "node_id, leased_by, chain_depth FROM schedule_runs",
    )


def _in_flight(dsn: str) -> int:
    rows = db_rows(
        dsn,
        "SELECT count(*) AS n FROM schedule_runs WHERE status IN ('queued', 'running') "
        "AND schedule_id IS NOT NULL AND chain_depth = 0",
    )
    return int(rows[0]["n"])


def test_fires_run_on_every_node_and_a_dead_nodes_run_is_failed(
    pg_dsn: str, tmp_path: Path
) -> None:
    with nodes(pg_dsn, tmp_path, ["node-a", "node-b", "node-c"]) as started:
        (leader,) = wait_until(
            lambda: [n for n in started if (n.health() or {}).get("leader")], 30, "a leader"
        )
        for i in range(SCHEDULES):
            started[i % 3].post("/api/schedules", schedule(f"s{i}", 1, "sleep", "0.3"))
        ran_on = wait_until(
            lambda: (
                {r["node_id"] for r in _runs(pg_dsn) if r["status"] == "completed"}
                if len({r["node_id"] for r in _runs(pg_dsn) if r["status"] == "completed"}) >= 2
                else None
            ),
            60,
            "completed fires on two nodes or more",
        )
        print(f"fires completed on {sorted(ran_on)}")
        samples = []
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            samples.append(_in_flight(pg_dsn))
            time.sleep(0.05)
        for item in leader.get("/api/schedules")["schedules"]:
            leader.post(f"/api/schedules/{item['id']}/disable", {})
        wait_until(lambda: _in_flight(pg_dsn) == 0, 60, "every fire ended")
        # A long fire; the node whose worker runs it is killed.
        long = leader.post("/api/schedules", schedule("long", 3600, "sleep", "120"))
        leader.post(f"/api/schedules/{long['id']}/trigger", {})  # fired by hand, queued
        (sleeper,) = wait_until(
            lambda: [
                r
                for r in _runs(pg_dsn)
                if r["schedule_id"] == long["id"] and r["status"] == "running" and r["child_pid"]
            ],
            60,
            "the long fire running on a worker",
        )
        assert sleeper["leased_by"] is not None
        (victim,) = [n for n in started if n.name == sleeper["node_id"]]
        print(f"killing {victim.name} (leader: {leader.name}), running {sleeper['id']}")
        survivors = [n for n in started if n is not victim]
        os.killpg(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait(timeout=10)
        failed = wait_until(
            lambda: [
                r for r in _runs(pg_dsn) if r["id"] == sleeper["id"] and r["status"] != "running"
            ],
            90,
            "the dead node's fire settled",
        )
        # On one host the worker's process is seen gone at once (another host's lease would
        # have to lapse first, and the run would read run.failed.node_lost).
        assert (failed[0]["status"], failed[0]["status_reason_code"]) in {
            ("failed", "run.failed.daemon_restart"),
            ("failed", "run.failed.node_lost"),
        }, failed
        wait_until(lambda: not pid_alive(int(sleeper["child_pid"])), 30, "its child gone")
        print(f"its run: {failed[0]['status_reason_code']}; in flight sampled {max(samples)}")
        (now_leading,) = wait_until(
            lambda: [n for n in survivors if (n.health() or {}).get("leader")], 30, "a leader"
        )
        # The leader's hold on the dead node's fire is released: its slot is free again.
        wait_until(
            lambda: (now_leading.health() or {}).get("scheduler", {}).get("in_flight") == 0,
            30,
            "the slot of the failed fire released",
        )
    assert max(samples) <= CAP, samples
    runs = _runs(pg_dsn)
    occurrences = [
        (r["schedule_id"], json.loads(r["trigger_context"]).get("due_at"))
        for r in runs
        if r["chain_depth"] == 0
        and json.loads(r["trigger_context"]).get("due_at") is not None
        and r["status"] != "skipped"
    ]
    assert len(occurrences) == len(set(occurrences)), "an occurrence fired twice"
    unfinished = [r for r in runs if r["status"] not in TERMINAL]
    assert unfinished == [], unfinished
    worked = {r["node_id"] for r in runs if r["status"] == "completed"}
    assert len(worked) >= 2, worked
