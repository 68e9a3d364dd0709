"""Failover on PostgreSQL with default settings: takeover after ``kill -9`` and ``kill -STOP``.

Starts a throwaway PostgreSQL cluster (studio_state.testing_pg). Each round, on a fresh
database, real `studio serve` nodes (`python -m studio_cli serve`, default settings: no
LIONAGI_STUDIO_TICK_SECONDS, so 30 s) are started and the one reporting ``leader: true`` in
``/api/health`` is hit:

  - kill9: three quiet nodes (nothing is written, so no write wakes a follower); the leader's
    process group gets SIGKILL; the figure is the time until a follower reports
    ``leader: true``;
  - stop: two nodes and an interval schedule firing every second; the leader's process gets
    SIGSTOP; the figure is the time until the other node reports ``leader: true``. Then
    SIGCONT: the old leader must report ``leader: false`` from its first answer on, and no
    ``(schedule_id, due_at)`` may have fired twice.

Medians with min–max over the rounds.

    python bench/failover.py [--rounds 5] [--what kill9,stop]

Run it with an interpreter that has studio-api, studio-cli and psycopg (the `postgres` test
environment: `hatch run hatch-test.py3.11-postgres:python bench/failover.py`, or that env's
python).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


class Node:
    """One `studio serve` process with default settings."""

    def __init__(self, name: str, url: str, work: Path, extra: dict[str, str]) -> None:
        from studio_state.testing import free_port

        self.name = name
        self.port = free_port()
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("LIONAGI_STUDIO_", "LIONAGI_SCHEDULER_"))
        }
        env.update(
            {
                "HOME": str(work),
                "LIONAGI_STUDIO_DB": url,
                "LIONAGI_STUDIO_NODE_ID": name,
                "LIONAGI_STUDIO_RUN_LOG_DIR": str(work / "runs" / name),
                "LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": "true",
                **extra,
            }
        )
        self.log = work / f"{name}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "studio_cli", "serve", "--port", str(self.port)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def health(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.port}/api/health", timeout=2
            ) as answer:
                return dict(json.load(answer))
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return None

    def post(self, path: str, body: dict[str, Any]) -> None:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).close()

    def leads(self) -> bool:
        return bool((self.health() or {}).get("leader"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _until(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"not within {timeout} s: {what}")


def _start(url: str, work: Path, count: int, extra: dict[str, str]) -> list[Node]:
    work.mkdir(parents=True, exist_ok=True)
    nodes = [Node(f"node-{i}", url, work, extra) for i in range(count)]
    for node in nodes:
        _until(lambda node=node: node.health(), 60, f"{node.name} serving")
    return nodes


def _leader(nodes: list[Node]) -> Node:
    leaders: list[Node] = _until(lambda: [n for n in nodes if n.leads()], 30, "a leader")
    assert len(leaders) == 1, [n.name for n in leaders]
    return leaders[0]


def _kill9(url: str, work: Path) -> float:
    nodes = _start(url, work, 3, {})
    try:
        leader = _leader(nodes)
        followers = [n for n in nodes if n is not leader]
        time.sleep(2)  # quiet: every follower's loop sleeps toward its 30 s tick
        os.killpg(leader.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        _until(lambda: any(n.leads() for n in followers), 60, "a new leader")
        return time.monotonic() - killed
    finally:
        for node in nodes:
            node.stop()


def _occurrences_unique(url: str) -> bool:
    from studio_state.testing import db_rows

    seen = [
        (row["schedule_id"], json.loads(row["trigger_context"]).get("due_at"))
        for row in db_rows(url, "SELECT schedule_id, trigger_context FROM schedule_runs")
        if json.loads(row["trigger_context"] or "{}").get("scheduled")
    ]
    return len(seen) == len(set(seen))


def _stop(url: str, work: Path) -> float:
    nodes = _start(url, work, 2, {})
    try:
        leader = _leader(nodes)
        (follower,) = [n for n in nodes if n is not leader]
        follower.post(
            "/api/schedules",
            {
                "name": "every-second",
                "trigger_type": "interval",
                "interval_sec": 1,
                "action_kind": "command",
                "action_command": "true",
                "action_cwd": str(work),
            },
        )
        time.sleep(3)
        os.kill(leader.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            _until(follower.leads, 60, "a new leader")
            took = time.monotonic() - stopped
        finally:
            os.kill(leader.proc.pid, signal.SIGCONT)
        first = _until(leader.health, 30, "the old leader answering")
        if first.get("leader") is not False:
            raise SystemExit(f"the resumed leader still leads: {first}")
        time.sleep(3)
        if leader.leads() or not follower.leads():
            raise SystemExit("two leaders, or none, after SIGCONT")
        if not _occurrences_unique(url):
            raise SystemExit("an occurrence fired twice")
        return took
    finally:
        for node in nodes:
            node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--what", default="kill9,stop")
    args = parser.parse_args()
    from studio_state.testing_pg import start_cluster

    cluster = start_cluster()
    base = cluster.dsn.rsplit("/", 1)[0]
    work = Path(tempfile.mkdtemp(prefix="studio-failover-"))
    results: dict[str, list[float]] = {}
    try:
        import psycopg

        for what in args.what.split(","):
            measure = {"kill9": _kill9, "stop": _stop}[what]
            for index in range(args.rounds):
                name = f"{what}_{index}"
                with psycopg.connect(cluster.dsn, autocommit=True) as admin:
                    admin.execute(f"CREATE DATABASE {name}")
                took = measure(f"{base}/{name}", work / name)
                results.setdefault(what, []).append(took)
                print(f"{what} round {index + 1}: takeover {took:.2f} s", flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("\nwhat   rounds  median  min–max (s)   target")
    for what, values in results.items():
        target = "≤ 5 s" if what == "kill9" else "≤ 15 s"
        print(
            f"{what:<6} {len(values):>6}  {statistics.median(values):6.2f}  "
            f"{min(values):.2f}–{max(values):.2f}   {target}"
        )


if __name__ == "__main__":
    main()
