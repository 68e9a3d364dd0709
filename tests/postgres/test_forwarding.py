"""Every route on every node: three real ``studio serve`` processes on one throwaway PostgreSQL
database, asked through a round-robin (each request to the next node in turn, as the simplest
load balancer would).

What only the leader may do (a manual trigger, a backfill) is forwarded by a follower to the
leader's ``LIONAGI_STUDIO_NODE_URL`` and answered as the leader answered; everything else is
answered by the node asked. Each operation is sent once to every node, and no answer is a 500.
The CLI's remote operations (``schedule trigger --url``, a remote run's log) work against each
node. A follower that cannot reach the leader (no leader, a leader without a URL, one that
does not answer) answers 503 naming it, and a forwarded request is never forwarded again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from studio_api.testing import RoundRobin, ServeProcess
from studio_state.postgres import SCHEDULER_LOCK_KEY
from studio_state.testing import db_rows, free_port, wait_for

PROXIED = "x-studio-proxied"
TERMINAL = {"completed", "failed", "timed_out", "cancelled", "skipped"}


@pytest.fixture
def cluster() -> Iterator[list[ServeProcess]]:
    started: list[ServeProcess] = []
    yield started
    for node in reversed(started):
        node.stop()


def _leader(nodes: list[ServeProcess]) -> ServeProcess:
    def found() -> ServeProcess | None:
        leading = [n for n in nodes if (n.health() or {}).get("leader")]
        return leading[0] if len(leading) == 1 else None

    return wait_for(found, 30, what="one leader")


def _schedule(name: str, *argv: str) -> dict[str, Any]:
    command, *args = argv or ("true",)
    return {
        "name": name,
        "trigger_type": "interval",
        "interval_sec": 3600,
        "action_kind": "command",
        "action_command": command,
        "action_command_args": args,
    }


def _status(dsn: str, run_id: str) -> str:
    rows = db_rows(dsn, "SELECT status FROM schedule_runs WHERE id = ?", (run_id,))
    return str(rows[0]["status"]) if rows else ""


def _each(rr: RoundRobin, nodes: int, method: str, path: str, **kw: Any) -> list[httpx.Response]:
    """``method path`` once through every node (the round-robin's next ``nodes`` turns)."""
    answers = []
    for _ in range(nodes):
        answer = rr.request(method, path, **kw)
        assert answer.status_code < 500, (rr.last, method, path, answer.text)
        answers.append(answer)
    return answers


def test_every_api_operation_through_every_node(
    pg_dsn: str, tmp_path: Path, cluster: list[ServeProcess]
) -> None:
    for name in ("node-a", "node-b", "node-c"):
        cluster.append(ServeProcess.node(name, pg_dsn, tmp_path / name))
    leader = _leader(cluster)
    urls = [n.url for n in cluster]
    rr = RoundRobin(urls)
    try:
        # Reads of every kind, through each node.
        for path in (
            "/api/health",
            "/api/schedules",
            "/api/schedules/limits",
            "/api/runs",
            "/api/dispatch",
        ):
            for answer in _each(rr, 3, "GET", path):
                assert answer.status_code == 200, (rr.last, path, answer.text)

        # Create: one schedule through each node; a taken name is 409 through each node.
        created = [
            rr.request("POST", "/api/schedules", json=_schedule(f"s{i}", "true")) for i in range(3)
        ]
        assert [a.status_code for a in created] == [201, 201, 201], [a.text for a in created]
        ids = [str(a.json()["id"]) for a in created]
        for answer in _each(rr, 3, "POST", "/api/schedules", json=_schedule("s0")):
            assert answer.status_code == 409, answer.text
        sid = ids[0]

        for answer in _each(rr, 3, "GET", f"/api/schedules/{sid}"):
            assert answer.json()["id"] == sid
        for i, answer in enumerate(
            _each(rr, 3, "PATCH", f"/api/schedules/{sid}", json={"description": "x"})
        ):
            assert answer.status_code == 200 and answer.json()["description"] == "x", i
        for answer in _each(rr, 3, "GET", f"/api/schedules/{sid}/preview", params={"n": 2}):
            assert answer.status_code == 200, answer.text
        for verb in ("disable", "enable"):
            for answer in _each(rr, 3, "POST", f"/api/schedules/{sid}/{verb}"):
                assert answer.status_code == 200, (verb, answer.text)
                assert answer.json()["enabled"] is (verb == "enable")

        # Trigger: through each node; followers forward to the leader, which fires.
        run_ids = []
        for i, answer in enumerate(_each(rr, 3, "POST", f"/api/schedules/{sid}/trigger")):
            assert answer.status_code == 202, (urls[i], answer.text)
            forwarded = answer.headers.get("x-studio-forwarded-to")
            assert forwarded == (None if urls[i] == leader.url else leader.name), urls[i]
            run_ids.append(str(answer.json()["run_id"]))
        assert len(set(run_ids)) == 3
        wait_for(lambda: all(_status(pg_dsn, r) in TERMINAL for r in run_ids), 60)
        assert {_status(pg_dsn, r) for r in run_ids} == {"completed"}
        for answer in _each(rr, 3, "GET", f"/api/schedules/runs/{run_ids[0]}"):
            assert answer.json()["status"] == "completed"
        for answer in _each(rr, 3, "GET", f"/api/schedules/{sid}/runs"):
            assert {r["id"] for r in answer.json()["runs"]} >= set(run_ids)
        for answer in _each(rr, 3, "GET", f"/api/schedules/runs/{run_ids[0]}/log"):
            assert answer.status_code == 200, answer.text

        # A refusal from the leader's gates comes back as the leader gave it (404 here).
        for answer in _each(rr, 3, "POST", "/api/schedules/no-such-id/trigger"):
            assert answer.status_code == 404, answer.text

        # Backfill: through each node (an hour each, one occurrence with a 3600 s interval).
        before = len(
            db_rows(pg_dsn, "SELECT id FROM schedule_runs WHERE schedule_id = ?", (ids[1],))
        )
        now = int(time.time())
        answers = []
        for k in range(3):
            start = now - 3600 * (3 * k + 4)
            answers.append(
                rr.request(
                    "POST",
                    f"/api/schedules/{ids[1]}/backfill",
                    json={"start": start, "end": start + 3 * 3600},
                )
            )
        assert all(a.status_code == 202 for a in answers), [a.text for a in answers]
        assert all(a.json()["runs"] >= 1 for a in answers), [a.json() for a in answers]
        wait_for(
            lambda: (
                len(
                    db_rows(
                        pg_dsn,
                        "SELECT id FROM schedule_runs "
                        "WHERE schedule_id = ? AND status = 'completed'",
                        (ids[1],),
                    )
                )
                > before
            ),
            60,
        )
        # every backfilled run has ended before the deletes below (a running one refuses them)
        wait_for(
            lambda: (
                not db_rows(
                    pg_dsn,
                    "SELECT id FROM schedule_runs WHERE schedule_id = ? "
                    "AND status IN ('queued', 'waiting_dependency', 'running', 'retry_wait')",
                    (ids[1],),
                )
            ),
            60,
        )

        # Ad-hoc runs and cancels: one long run started through each node, cancelled through
        # the next one.
        started = [
            rr.request(
                "POST",
                "/api/runs",
                json={
                    "action_kind": "command",
                    "action_command": "sleep",
                    "action_command_args": ["30"],
                },
            )
            for _ in range(3)
        ]
        assert [a.status_code for a in started] == [202] * 3, [a.text for a in started]
        adhoc = [str(a.json()["run_id"]) for a in started]
        wait_for(lambda: all(_status(pg_dsn, r) == "running" for r in adhoc), 60)
        rr.request("GET", "/api/health")  # shift by one: each run is cancelled by another node
        for run_id in adhoc:
            answer = rr.request("POST", f"/api/schedules/runs/{run_id}/cancel")
            assert answer.status_code in (200, 202), (rr.last, answer.text)
        wait_for(lambda: all(_status(pg_dsn, r) == "cancelled" for r in adhoc), 30)

        # Delete: each schedule through another node; then a 404 through each node.
        for schedule_id in ids:
            answer = rr.request("DELETE", f"/api/schedules/{schedule_id}")
            assert answer.status_code == 200, (rr.last, answer.text)
        for answer in _each(rr, 3, "GET", f"/api/schedules/{sid}"):
            assert answer.status_code == 404
    finally:
        rr.close()


def _cli(home: Path, dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "studio_cli", *args],
        env={
            **os.environ,
            "HOME": str(home),
            "LIONAGI_STUDIO_DB": dsn,
            "LIONAGI_STUDIO_RUN_LOG_DIR": str(home / "elsewhere"),
        },
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_the_cli_triggers_and_reads_through_every_node(
    pg_dsn: str, tmp_path: Path, cluster: list[ServeProcess]
) -> None:
    for name in ("node-a", "node-b", "node-c"):
        cluster.append(ServeProcess.node(name, pg_dsn, tmp_path / name))
    _leader(cluster)
    made = httpx.post(
        f"{cluster[1].url}/api/schedules", json=_schedule("echoer", "sh", "-c", "echo hello")
    )
    assert made.status_code == 201, made.text
    for node in cluster:
        done = _cli(tmp_path, pg_dsn, "schedule", "trigger", "echoer", "--wait", "--url", node.url)
        assert done.returncode == 0, (node.name, done.stdout, done.stderr)
    runs = db_rows(
        pg_dsn, "SELECT id, status FROM schedule_runs WHERE trigger_context LIKE ?", ("%manual%",)
    )
    assert len(runs) == 3 and {r["status"] for r in runs} == {"completed"}, runs
    shown = _cli(tmp_path, pg_dsn, "schedule", "logs", str(runs[0]["id"]), "--db", pg_dsn)
    assert shown.returncode == 0 and shown.stdout == "hello\n", (shown.stdout, shown.stderr)


def test_a_follower_that_cannot_reach_the_leader_answers_503_naming_it(
    pg_dsn: str, pg_cluster_dsn: str, tmp_path: Path, cluster: list[ServeProcess]
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    cluster.append(ServeProcess.node("node-gone", pg_dsn, tmp_path / "a", node_url=dead))
    _leader(cluster)
    follower = ServeProcess.node("node-b", pg_dsn, tmp_path / "b")
    cluster.append(follower)
    made = httpx.post(f"{follower.url}/api/schedules", json=_schedule("s"))
    sid = made.json()["id"]
    for path, body in (
        (f"/api/schedules/{sid}/trigger", None),
        (f"/api/schedules/{sid}/backfill", {"start": 0, "end": 3600}),
    ):
        answer = httpx.post(f"{follower.url}{path}", json=body)
        assert answer.status_code == 503, answer.text
        assert "node-gone" in answer.text and dead in answer.text, answer.text
    # A request already forwarded once is not forwarded again: the follower refuses it.
    again = httpx.post(f"{follower.url}/api/schedules/{sid}/trigger", headers={PROXIED: "1"})
    assert again.status_code == 503 and "node-b" in again.text, again.text
    assert not db_rows(pg_dsn, "SELECT id FROM schedule_runs")

    # The leader goes; the follower leads and fires itself.
    cluster[0].stop()
    wait_for(lambda: (follower.health() or {}).get("leader"), 30)
    fired = httpx.post(f"{follower.url}/api/schedules/{sid}/trigger")
    assert fired.status_code == 202, fired.text


def test_no_leader_and_a_leader_without_url_are_503_naming_them(
    pg_dsn: str, tmp_path: Path, cluster: list[ServeProcess]
) -> None:
    # Something other than a Studio node holds the leader lock: no node leads.
    with psycopg.connect(pg_dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (SCHEDULER_LOCK_KEY,))
        node = ServeProcess.node("node-a", pg_dsn, tmp_path / "a")
        cluster.append(node)
        sid = httpx.post(f"{node.url}/api/schedules", json=_schedule("s")).json()["id"]
        answer = httpx.post(f"{node.url}/api/schedules/{sid}/trigger")
        assert answer.status_code == 503 and "no node leads" in answer.text, answer.text
        assert answer.headers.get("retry-after")
    # The lock is free now: node-a leads; a follower without a way to reach it names it.
    wait_for(lambda: (node.health() or {}).get("leader"), 30)
    node.stop()
    cluster.clear()
    quiet = ServeProcess.node("node-quiet", pg_dsn, tmp_path / "q", node_url=False)
    cluster.append(quiet)
    _leader(cluster)
    other = ServeProcess.node("node-b", pg_dsn, tmp_path / "b")
    cluster.append(other)
    answer = httpx.post(f"{other.url}/api/schedules/{sid}/trigger")
    assert answer.status_code == 503, answer.text
    assert "node-quiet" in answer.text and "LIONAGI_STUDIO_NODE_URL" in answer.text
