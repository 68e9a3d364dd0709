"""Studio on PostgreSQL end to end: real ``studio serve`` processes on one throwaway cluster.

One node serves, migrates and fires an interval schedule; the CLI works against the same URL.
Three nodes elect one leader; ``kill -9`` of the leader hands schedule evaluation to another
node within a tick (plus slack for a loaded machine); no occurrence fires twice and every run
ends terminal. The commands are the ones ``docs/operations.md`` ("Running several nodes")
shows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from studio_api.testing import ServeProcess
from studio_state.testing import db_rows, pid_alive

# The nodes are real `studio serve` processes of this environment: the postgres test entry
# must install studio-api and studio-cli (hatch.toml's postgres workspace members).

TICK = 1.0
CAP = 4
SCHEDULES = 100
DISPATCHES = 60
#: Failover must land within one tick; the slack covers a loaded two-core machine.
FAILOVER_SLACK = 4.0
TERMINAL = {"completed", "failed", "timed_out", "cancelled", "skipped"}


def start_node(
    name: str, dsn: str, home: Path, extra_env: dict[str, str] | None = None
) -> ServeProcess:
    """One ``studio serve`` node (its home ``home/<name>``), without a node URL: a follower
    cannot forward to the leader (test_forwarding.py covers nodes that can)."""
    env = {
        "LIONAGI_STUDIO_TICK_SECONDS": str(TICK),
        "LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": "true,sleep",
        "LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT": str(CAP),
        "LIONAGI_STUDIO_NOTIFY_TEMPLATE": '["true", "{deliver_to}"]',
        **(extra_env or {}),
    }
    return ServeProcess.node(name, dsn, home / name, node_url=False, env=env)


def post_status(node: ServeProcess, path: str, body: dict[str, Any]) -> tuple[int, str | None]:
    """POST expecting a refusal: its status and ``reason_code``."""
    answer = httpx.post(f"{node.url}{path}", json=body, timeout=30)
    reason = answer.json().get("reason_code") if answer.status_code >= 400 else None
    return answer.status_code, reason


def studio() -> list[str]:
    """The ``studio`` command of this interpreter's environment."""
    return [sys.executable, "-m", "studio_cli"]


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout}s: {what}")
        time.sleep(0.05)


@contextmanager
def nodes(
    dsn: str, home: Path, names: list[str], extra_env: dict[str, str] | None = None
) -> Iterator[list[ServeProcess]]:
    started: list[ServeProcess] = []
    try:
        for name in names:
            started.append(start_node(name, dsn, home, extra_env))
        yield started
    finally:
        for node in started:
            node.stop()


def cli(dsn: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HOME": str(home),
        "LIONAGI_STUDIO_RUN_LOG_DIR": str(home / "runs"),
        "LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": "true",
        "COLUMNS": "240",
    }
    # --db before a "--": what follows it is the command's own argv
    cut = args.index("--") if "--" in args else len(args)
    return subprocess.run(
        [*studio(), *args[:cut], "--db", dsn, *args[cut:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def schedule(name: str, interval: int, *argv: str) -> dict[str, Any]:
    command, *args = argv or ("true",)
    return {
        "name": name,
        "trigger_type": "interval",
        "interval_sec": interval,
        "action_kind": "command",
        "action_command": command,
        "action_command_args": args,
    }


def scheduled_runs(dsn: str) -> list[dict[str, Any]]:
    return db_rows(
        dsn,
        "SELECT id, schedule_id, status, status_reason_code, trigger_context, child_pid "
        "FROM schedule_runs",
    )


def test_one_node_serves_fires_and_the_cli_shares_its_database(pg_dsn: str, tmp_path: Path) -> None:
    with nodes(pg_dsn, tmp_path, ["solo"]) as (solo,):
        health = solo.health()
        assert health is not None
        assert (health["backend"], health["leader"], health["node_id"]) == (
            "postgresql",
            True,
            "solo",
        )
        assert health["status"] == "ok", health
        created = cli(
            pg_dsn, tmp_path, "schedule", "create", "every-second", "--interval", "1s",
            "--command", "true",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        listed = cli(pg_dsn, tmp_path, "schedule", "list")
        assert listed.returncode == 0 and "every-second" in listed.stdout, listed.stderr
        wait_until(
            lambda: [r for r in scheduled_runs(pg_dsn) if r["status"] == "completed"],
            30,
            "a completed fire",
        )
        shown = cli(pg_dsn, tmp_path, "schedule", "show", "every-second")
        assert shown.returncode == 0 and "every-second" in shown.stdout, shown.stderr
        served = solo.get("/api/schedules")
        assert [s["name"] for s in served["schedules"]] == ["every-second"]
        adhoc = cli(pg_dsn, tmp_path, "run", "command", "--wait", "--", "true")
        assert adhoc.returncode == 0, adhoc.stderr
        listed_runs = cli(pg_dsn, tmp_path, "run", "list")
        assert listed_runs.returncode == 0 and "completed" in listed_runs.stdout, listed_runs
        # The outbox: enqueued by the CLI, delivered by the node.
        enqueued = cli(
            pg_dsn, tmp_path, "dispatch", "enqueue", "--kind", "deploy.finished", "--to", "ops",
            "--body", '{"ok": true}',
        )  # fmt: skip
        assert enqueued.returncode == 0, enqueued.stderr
        dispatch_id = enqueued.stdout.split()[0]
        wait_until(
            lambda: (
                db_rows(pg_dsn, "SELECT status FROM dispatch_outbox WHERE id = ?", (dispatch_id,))
                == [{"status": "delivered"}]
            ),
            30,
            "the dispatch delivered",
        )
        listed_dispatches = cli(pg_dsn, tmp_path, "dispatch", "list")
        assert dispatch_id in listed_dispatches.stdout, listed_dispatches


def test_three_nodes_one_leader_and_failover_after_kill_9(pg_dsn: str, tmp_path: Path) -> None:
    # The leader runs the fires itself here (test_nodes_any_node.py: any node's worker does).
    leader_runs = {"LIONAGI_STUDIO_SCHEDULED_ON_ANY_NODE": "0"}
    with nodes(pg_dsn, tmp_path, ["node-a", "node-b", "node-c"], leader_runs) as started:
        leaders = wait_until(
            lambda: [n for n in started if (n.health() or {}).get("leader")],
            30,
            "a leader",
        )
        assert len(leaders) == 1
        (leader,) = leaders
        followers = [n for n in started if n is not leader]
        for node in started:
            health = node.health()
            assert health is not None and health["status"] == "ok", health
        # Every node serves the API: schedules are created through the followers.
        long = followers[0].post("/api/schedules", schedule("long", 1, "sleep", "120"))
        for i in range(SCHEDULES):
            followers[i % 2].post("/api/schedules", schedule(f"s{i}", 1))
        wait_until(
            lambda: len({r["schedule_id"] for r in scheduled_runs(pg_dsn)}) == SCHEDULES + 1,
            60,
            "every schedule fired",
        )
        in_flight = sample_in_flight(started, seconds=2.0)
        refused = post_status(followers[1], f"/api/schedules/{long['id']}/trigger", {})
        # A follower forwards a trigger to the leader; these nodes give no
        # LIONAGI_STUDIO_NODE_URL, so it cannot (test_forwarding.py: nodes that do).
        assert refused[0] == 503, refused
        (sleeper,) = [
            r for r in scheduled_runs(pg_dsn) if r["schedule_id"] == long["id"] and r["child_pid"]
        ]
        assert sleeper["status"] == "running"
        # Dispatches enqueued on every node just before the kill; every node delivers.
        for i in range(DISPATCHES):
            started[i % 3].post("/api/dispatch", {"kind": "k", "deliver_to": f"d{i}"})

        os.killpg(leader.proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        leader.proc.wait(timeout=10)
        successor = wait_until(
            lambda: next((n for n in followers if (n.health() or {}).get("leader")), None),
            TICK + FAILOVER_SLACK + 10,
            "a new leader",
        )
        failover = time.monotonic() - killed_at
        print(f"failover after kill -9: {failover:.2f}s (tick {TICK}s)")
        assert failover <= TICK + FAILOVER_SLACK, failover
        # The dead leader's run in flight: failed as node_lost, its child terminated.
        lost = wait_until(
            lambda: [
                r
                for r in scheduled_runs(pg_dsn)
                if r["id"] == sleeper["id"] and r["status"] != "running"
            ],
            30,
            "the dead leader's run reconciled",
        )
        assert (lost[0]["status"], lost[0]["status_reason_code"]) == (
            "failed",
            "run.failed.node_lost",
        )
        wait_until(lambda: not pid_alive(int(sleeper["child_pid"])), 30, "its child gone")
        before = len(scheduled_runs(pg_dsn))
        wait_until(
            lambda: len(scheduled_runs(pg_dsn)) >= before + SCHEDULES,
            60,
            "fires under the new leader",
        )
        in_flight += sample_in_flight(followers, seconds=2.0)
        assert [n for n in followers if (n.health() or {}).get("leader")] == [successor]
        # A dispatch the dead node had claimed is claimed again once its lease lapses (15 s).
        wait_until(
            lambda: (
                db_rows(
                    pg_dsn, "SELECT count(*) AS n FROM dispatch_outbox WHERE status = 'delivered'"
                )[0]["n"]
                == DISPATCHES
            ),
            60,
            "every dispatch delivered",
        )
    claims = db_rows(
        pg_dsn,
        "SELECT d.id, d.attempt, count(t.id) AS claims FROM dispatch_outbox d "
        "LEFT JOIN status_transitions t ON t.entity_id = d.id "
        "AND t.reason_code = 'dispatch.delivering.claimed' GROUP BY d.id, d.attempt",
    )
    assert len(claims) == DISPATCHES
    # none lost; each attempt claimed (and so sent) once
    assert all(row["claims"] == row["attempt"] >= 1 for row in claims), claims
    assert max(in_flight) <= CAP, in_flight
    runs = scheduled_runs(pg_dsn)
    occurrences = [
        (r["schedule_id"], json.loads(r["trigger_context"]).get("due_at"))
        for r in runs
        if json.loads(r["trigger_context"]).get("scheduled")
    ]
    assert len(occurrences) == len(set(occurrences)), "an occurrence fired twice"
    unfinished = [r for r in runs if r["status"] not in TERMINAL]
    assert unfinished == [], unfinished


def sample_in_flight(started: list[ServeProcess], *, seconds: float) -> list[int]:
    """The scheduled fires in flight on all nodes together, sampled for ``seconds``."""
    samples: list[int] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        samples.append(
            sum(int((n.health() or {}).get("scheduler", {}).get("in_flight", 0)) for n in started)
        )
        time.sleep(0.05)
    return samples


def test_a_leader_whose_connection_breaks_hands_over(pg_dsn: str, tmp_path: Path) -> None:
    """Every session of the leader but its election's ends (a server-side kill): its loop
    stops, it gives the lock up, and the other node leads."""
    import psycopg

    with nodes(pg_dsn, tmp_path, ["node-a"]) as (first,):
        wait_until(lambda: (first.health() or {}).get("leader"), 30, "node-a leads")
        with nodes(pg_dsn, tmp_path, ["node-b"]) as (second,):
            assert (second.health() or {}).get("leader") is False
            with psycopg.connect(pg_dsn, autocommit=True) as admin:
                ended = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'studio:node-a' AND pid NOT IN "
                    "(SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted)"
                ).fetchall()
            assert ended, "node-a had sessions besides its election's"
            wait_until(lambda: (second.health() or {}).get("leader"), 30, "node-b leads")
            health = first.health()
            assert health is not None and health["leader"] is False, health
            assert health["status"] == "degraded", health
