"""The benchmarks behind issue 18's acceptance still run against the packages as they are.

They are not run for their figures here (too slow and noisy to mean anything in CI; their
results are in ``bench/README.md``): each runs once at a tiny size in a subprocess with this
interpreter and must exit 0 having printed its report. A benchmark that reaches into a module
the packages have since changed fails here, not on the next person who measures with it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _run(script: str, *args: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_growth_runs_every_hot_query_at_two_history_sizes(tmp_path: Path) -> None:
    out = _run(
        "growth.py",
        "--sizes", "0,300", "--reps", "1", "--schedules", "100,200", "--db-dir", str(tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    for query in ("outbox dispatch_backlog", "dashboard runs page", "GET /api/schedules"):
        assert query in out
    assert "target: every ratio <= 1.5x" in out


def test_fires_runs_the_engine_beside_the_spawn_limit(tmp_path: Path) -> None:
    out = _run(
        "fires.py",
        "--rounds", "1", "--seconds", "1", "--sustained", "5", "--saturated", "20",
        cwd=tmp_path,
    )  # fmt: skip
    assert "spawn limit (bare Popen + pidfd, 16 wide)" in out
    assert "sustained p99 due → commit lag" in out


def test_health_measures_the_reads_in_process_and_served(tmp_path: Path) -> None:
    out = _run(
        "health.py",
        "--schedules", "50", "--runs", "300", "--more", "0", "--reps", "1", "--requests", "2",
        "--db-dir", str(tmp_path),
        cwd=tmp_path,
    )  # fmt: skip
    inprocess, served = out.split("served (uvicorn", 1)
    for read in ("activity 7d", "spend by schedule", "health of all schedules"):
        assert read in inprocess
    for read in ("activity 24h", "activity 7d", "spend by schedule", "spend by action"):
        assert read in served
