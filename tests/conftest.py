from __future__ import annotations

import collections
import json
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from studio_api.testing import ServeProcess
from studio_state.testing import (  # noqa: F401  (clean_environment: autouse fixture)
    clean_environment,
    db_rows,
    kill_quietly,
    pid_alive,
    wait_for,
)

ROOT = Path(__file__).resolve().parent.parent

# The test modules import the helpers below by name (``from conftest import write_script``).
# Under pytest's importlib import mode (how `hatch test` runs) this file is not importable as
# ``conftest``; pytest loads it before the test modules beside it, so register it here.
sys.modules.setdefault("conftest", sys.modules[__name__])


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


# -- figures: what the reliability and security tests tried (printed at the end of the run) --
FIGURES: collections.Counter[str] = collections.Counter()
"""Counters the tests add to: ``crashes_survived``, ``inputs_tried``, ``rows_checked``,
``rows_lost`` ... printed in the terminal summary (RELIABILITY.md quotes them)."""


def count(name: str, n: int = 1) -> None:
    """Add ``n`` to the figure ``name``."""
    FIGURES[name] += n


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FIGURES:
        figures = ", ".join(f"{k}={v}" for k, v in sorted(FIGURES.items()))
        terminalreporter.write_line(f"reliability figures: {figures}")


# -- small helpers ---------------------------------------------------------------------------
def db_value(db: Path, sql: str, params: tuple[Any, ...] = ()) -> Any:
    rows = db_rows(db, sql, params)
    return next(iter(rows[0].values())) if rows else None


def assert_consistent(db: Path) -> dict[str, int]:
    """Invariants every database must keep whatever crashed when; returns row counts.

    - no schedule_run or invocation is left ``running`` (call it once the server stopped and
      a restart reconciled);
    - every run's last status transition names its current status, and so for invocations;
    - every scheduled occurrence (``due_at``, or ``missed_fire_at`` of a missed-fire recovery)
      was fired at most once;
    - every run that fired has its invocation row.
    """
    runs = db_rows(db, "SELECT * FROM schedule_runs")
    invocations = {r["id"]: r for r in db_rows(db, "SELECT * FROM invocations")}
    stuck = [r["id"] for r in runs if r["status"] == "running"]
    stuck += [i for i, r in invocations.items() if r["status"] == "running"]
    assert stuck == [], f"left running: {stuck}"
    last = {
        (r["entity_type"], r["entity_id"]): r["status"]
        for r in db_rows(
            db,
            "SELECT entity_type, entity_id, status FROM status_transitions "
            "ORDER BY created_at, rowid",
        )
    }
    for run in runs:
        assert last.get(("schedule_run", run["id"])) == run["status"], run
    for inv in invocations.values():
        assert last.get(("invocation", inv["id"])) == inv["status"], inv
    occurrences: collections.Counter[tuple[str, float]] = collections.Counter()
    for run in runs:
        context = json.loads(run["trigger_context"] or "{}")
        fired = run["status"] != "skipped" and run["schedule_id"] and run["chain_depth"] == 0
        due = context.get("due_at") if context.get("scheduled") else context.get("missed_fire_at")
        if fired and due is not None:  # a scheduled fire or a missed-fire recovery fire
            occurrences[(run["schedule_id"], float(due))] += 1
        if run["status"] not in ("skipped", "queued", "cancelled") and run["invocation_id"]:
            assert run["invocation_id"] in invocations, run
    twice = {k: v for k, v in occurrences.items() if v > 1}
    assert twice == {}, f"occurrences fired more than once: {twice}"
    return {"runs": len(runs), "invocations": len(invocations), "occurrences": len(occurrences)}


# -- children that tell the test when they start ----------------------------------------------
MARKER_CHILD = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys, time

    marker, mode = sys.argv[1], sys.argv[2]
    if os.path.exists(marker):
        sys.exit(0)  # only the first run of a schedule is the long one
    grandchild = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    info = {"pid": os.getpid(), "grandchild": grandchild.pid, "ppid": os.getppid(),
            "pgid": os.getpgid(0), "invocation": os.environ.get("LIONAGI_INVOCATION_ID")}
    with open(marker + ".tmp", "w") as handle:
        json.dump(info, handle)
    os.replace(marker + ".tmp", marker)
    if mode == "kill-parent":
        os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(300)
    """
)

# sh: kills its parent (the server) as its very first act, before the server can have done
# anything after exec returned (recording the pid, the lease, the terminal write).
KILL_PARENT_SH = textwrap.dedent(
    """
    [ -e "$1" ] && exit 0  # only the first run is the one that kills
    kill -9 "$PPID"
    python3 -c 'import time; time.sleep(300)' &
    printf '{"pid": %s, "grandchild": %s}' "$$" "$!" > "$1.tmp"
    mv "$1.tmp" "$1"
    wait
    """
)


def write_script(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def read_marker(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@pytest.fixture
def studio_process(tmp_path: Path) -> Iterator[Callable[..., ServeProcess]]:
    """Factory of :class:`ServeProcess` objects (each ``kill9`` counts a crash survived);
    each is killed at teardown if still up."""
    made: list[ServeProcess] = []

    def make(
        base: Path | None = None,
        *,
        db: Path | None = None,
        env: Mapping[str, str] | None = None,
        unprivileged: bool = False,
        nofile: tuple[int, int] | None = None,
    ) -> ServeProcess:
        where = base if base is not None else tmp_path / f"studio{len(made)}"
        server = ServeProcess(
            where,
            db=db,
            env=env,
            unprivileged=unprivileged,
            nofile=nofile,
            on_kill9=lambda: count("crashes_survived"),
        )
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()
        server.kill()


@pytest.fixture
def reap_pids() -> Iterator[list[int]]:
    """Pids a test started indirectly (markers' children): SIGKILLed at teardown."""
    pids: list[int] = []
    yield pids
    kill_quietly(*pids)
