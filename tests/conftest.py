from __future__ import annotations

import collections
import json
import os
import re
import resource
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from studio_state.testing import (  # noqa: F401  (clean_environment: autouse fixture)
    clean_environment,
    db_rows,
    kill_quietly,
    pid_alive,
    wait_for,
)

ROOT = Path(__file__).resolve().parent.parent

# The test modules import the helpers below by name (``from conftest import StudioProcess``).
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


# Permission bits do not stop root: a process that must meet them (a read-only directory)
# first drops CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH from its bounding set, then execs argv.
DROP_DAC = textwrap.dedent(
    """
    import ctypes, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    if os.geteuid() == 0 and libc.prctl(23, 1, 0, 0, 0) == 1:  # PR_CAPBSET_READ
        for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    os.execv(sys.argv[1], sys.argv[1:])
    """
)


# -- a real `studio serve` process -------------------------------------------------------------
_RUNNING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


def isolated_env(base: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The parent's environment minus every Studio variable, HOME = ``base``, fast ticks."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LIONAGI_", "STUDIO_", "FAKE_LI")) and k != "GITHUB_TOKEN"
    }
    bindir = base / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    python3 = bindir / "python3"
    if not python3.exists():  # children's `python3` is this interpreter, found first on PATH
        python3.symlink_to(sys.executable)
    env.update(
        HOME=str(base),
        PATH=f"{bindir}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
        PYTHONUNBUFFERED="1",
        LIONAGI_STUDIO_TICK_SECONDS="1",
        LIONAGI_SCHEDULER_COMMAND_ALLOWLIST="python3,sh",
        LIONAGI_SCHEDULER_TZ="UTC",
    )
    env.update(extra or {})
    return env


class StudioProcess:
    """``python -m studio_cli serve`` in a subprocess: start, health, kill -9, restart.

    Its log (stdout + stderr) goes to ``base/studio-<n>.log`` per start.
    """

    def __init__(
        self,
        base: Path,
        *,
        db: Path | None = None,
        env: Mapping[str, str] | None = None,
        unprivileged: bool = False,
        nofile: tuple[int, int] | None = None,
    ) -> None:
        self.base = base
        self.nofile = nofile
        self.db = db if db is not None else base / "state.db"
        self.env = isolated_env(base, env)
        self.prefix: list[str] = []
        if unprivileged:  # file permissions apply even when the tests run as root
            dropper = write_script(base, "drop_dac.py", DROP_DAC)
            self.prefix = [sys.executable, str(dropper)]
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.starts = 0
        self.log_path = base / "studio-0.log"
        self._client: httpx.Client | None = None
        self._client_url = ""

    # -- lifecycle --------------------------------------------------------------------------
    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the server process without waiting for it."""
        self.starts += 1
        self.log_path = self.base / f"studio-{self.starts}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    *self.prefix,
                    sys.executable,
                    *("-m", "studio_cli", "serve", "--port", "0", "--db", str(self.db)),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.base,
                preexec_fn=None if self.nofile is None else self._limit_nofile,
            )
        return self.proc

    def _limit_nofile(self) -> None:  # in the child, before exec (as `ulimit -n` would)
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, self.nofile)

    def open_descriptors(self) -> int:
        """How many file descriptors the server process holds now."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def rss_kib(self) -> int:
        """The server's resident set size (VmRSS) in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def start(self, timeout: float = 60.0) -> str:
        """Start and wait until ``/api/health`` answers with the scheduler running."""
        proc = self.spawn()
        deadline = time.monotonic() + timeout
        while True:
            found = _RUNNING.search(self.log())
            if found:
                break
            if proc.poll() is not None:
                raise AssertionError(f"studio exited with {proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"studio did not start within {timeout}s:\n{self.log()}")
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{found.group(1)}"
        wait_for(
            lambda: (self.health() or {}).get("scheduler", {}).get("running"),
            timeout=max(1.0, deadline - time.monotonic()),
            what="health says the scheduler runs",
        )
        return self.url

    def kill9(self) -> None:
        """SIGKILL the server (its children live on, as after a real crash)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        count("crashes_survived")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (a graceful shutdown); SIGKILL if it does not exit in time."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc is not None else 0
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"studio did not stop within {timeout}s:\n{self.log()}") from None

    def close(self) -> None:
        """Close the kept-alive HTTP connection."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def restart(self) -> str:
        return self.start()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def all_logs(self) -> str:
        return "".join(
            (self.base / f"studio-{n}.log").read_text(errors="replace")
            for n in range(1, self.starts + 1)
            if (self.base / f"studio-{n}.log").exists()
        )

    # -- HTTP -------------------------------------------------------------------------------
    def health(self) -> dict[str, Any] | None:
        try:
            response = httpx.get(f"{self.url}/api/health", timeout=10)
        except httpx.HTTPError:
            return None
        return (
            response.json()
            if response.headers.get("content-type", "").startswith("application/json")
            else None
        )

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request on a kept-alive connection (a new one after a restart)."""
        kwargs.setdefault("timeout", 30)
        if self._client is None or self._client_url != self.url:
            if self._client is not None:
                self._client.close()
            self._client, self._client_url = httpx.Client(), self.url
        try:
            return self._client.request(method, f"{self.url}{path}", **kwargs)
        except httpx.TransportError:
            self._client.close()  # a dead server's connection: the next call reconnects
            self._client = None
            raise

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        return db_rows(self.db, sql, params)


@pytest.fixture
def studio_process(tmp_path: Path) -> Iterator[Callable[..., StudioProcess]]:
    """Factory of :class:`StudioProcess` objects; each is killed at teardown if still up."""
    made: list[StudioProcess] = []

    def make(
        base: Path | None = None,
        *,
        db: Path | None = None,
        env: Mapping[str, str] | None = None,
        unprivileged: bool = False,
        nofile: tuple[int, int] | None = None,
    ) -> StudioProcess:
        where = base if base is not None else tmp_path / f"studio{len(made)}"
        where.mkdir(parents=True, exist_ok=True)
        server = StudioProcess(where, db=db, env=env, unprivileged=unprivileged, nofile=nofile)
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()
        if server.proc is not None and server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


@pytest.fixture
def reap_pids() -> Iterator[list[int]]:
    """Pids a test started indirectly (markers' children): SIGKILLed at teardown."""
    pids: list[int] = []
    yield pids
    kill_quietly(*pids)
