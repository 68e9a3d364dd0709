"""An operator's cancel, through a real `studio serve`, real children and the real CLI.

- Every cancelled run is an outcome: ``studio_fires_total{outcome="cancelled"}`` counts it and
  the JSON log has its ``outcome`` line, whether the API cancelled it in the server or
  ``studio schedule cancel`` did on the database from another process.
- A child that ignores SIGTERM gets the whole grace period (5 s) before SIGKILL; one that
  exits on SIGTERM ends at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conftest import write_script

from studio_state.testing import pid_alive, wait_for

# Records each SIGTERM it receives (epoch seconds) and keeps running unless told to exit.
TRAP = """\
import os, signal, sys, time
out, mode = sys.argv[1], sys.argv[2]
def on_term(*_):
    with open(out + ".term", "a") as handle:
        handle.write(f"{time.time()}\\n")
    if mode == "exit":
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
with open(out + ".pid", "w") as handle:
    handle.write(str(os.getpid()))
print("up", flush=True)
while True:
    time.sleep(0.05)
"""


def _cli(server: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """``studio ARGS`` on the server's database directly (no server URL)."""
    env = {k: v for k, v in server.env.items() if k != "LIONAGI_STUDIO_URL"}
    proc = subprocess.run(
        [sys.executable, "-m", "studio_cli", *args, "--db", str(server.db)],
        capture_output=True,
        text=True,
        env=env,
        cwd=server.base,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _schedule(server: Any, name: str, trap: Path, out: Path, mode: str) -> str:
    body = {
        "name": name,
        "trigger_type": "interval",
        "interval_sec": 3600,
        "action_kind": "command",
        "action_command": "python3",
        "action_command_args": [str(trap), str(out), mode],
        "action_cwd": str(server.base),
    }
    created = server.request("POST", "/api/schedules", json=body)
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def _start_scheduled(server: Any, schedule_id: str) -> str:
    fired = server.request("POST", f"/api/schedules/{schedule_id}/trigger")
    assert fired.status_code in (200, 201, 202), fired.text
    return str(fired.json()["run_id"])


def _start_adhoc(server: Any, trap: Path, out: Path, mode: str) -> str:
    body = {
        "action_kind": "command",
        "action_command": "python3",
        "action_command_args": [str(trap), str(out), mode],
        "action_cwd": str(server.base),
    }
    queued = server.request("POST", "/api/runs", json=body)
    assert queued.status_code in (201, 202), queued.text
    return str(queued.json()["run_id"])


def _child_pid(out: Path) -> int:
    return int(
        wait_for(
            lambda: (
                out.with_name(out.name + ".pid").exists()
                and out.with_name(out.name + ".pid").read_text()
            ),
            timeout=30,
        )
    )


def _status(server: Any, run_id: str) -> dict[str, Any]:
    response = server.request("GET", f"/api/schedules/runs/{run_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def _gone_after_term(out: Path, pid: int) -> float:
    """Seconds from the child's first SIGTERM to its death (polled)."""
    wait_for(lambda: not pid_alive(pid), timeout=30, interval=0.01)
    gone = time.time()
    terms = out.with_name(out.name + ".term").read_text().split()
    return gone - float(terms[0])


def _outcome_lines(server: Any) -> list[dict[str, Any]]:
    lines = []
    for line in server.log().splitlines():
        if line.startswith("{"):
            data = json.loads(line)
            if data.get("event") == "outcome":
                lines.append(data)
    return lines


def _cancelled_total(server: Any) -> float:
    text = server.request("GET", "/metrics").text
    for line in text.splitlines():
        if line.startswith('studio_fires_total{outcome="cancelled"}'):
            return float(line.split()[-1])
    return 0.0


def test_cancelled_runs_are_outcomes_counted_and_logged(
    studio_process: Any, tmp_path: Path
) -> None:
    server = studio_process(
        env={"LIONAGI_STUDIO_LOG_FORMAT": "json", "LIONAGI_STUDIO_MAX_ADHOC_CONCURRENT": "1"}
    )
    server.start()
    trap = write_script(tmp_path, "trap.py", TRAP)
    sid = _schedule(server, "trap", trap, tmp_path / "s", "exit")
    cancelled: dict[str, str] = {}

    # the API, in the server: a scheduled run and a running ad-hoc run
    run = _start_scheduled(server, sid)
    _child_pid(tmp_path / "s")
    assert server.request("POST", f"/api/schedules/runs/{run}/cancel").status_code == 202
    cancelled[run] = "api scheduled"
    adhoc = _start_adhoc(server, trap, tmp_path / "a", "exit")
    _child_pid(tmp_path / "a")
    queued = _start_adhoc(server, trap, tmp_path / "q", "exit")  # behind the cap of 1
    assert _status(server, queued)["status"] == "queued"
    assert server.request("POST", f"/api/schedules/runs/{queued}/cancel").status_code == 202
    cancelled[queued] = "api queued"
    assert server.request("POST", f"/api/schedules/runs/{adhoc}/cancel").status_code == 202
    cancelled[adhoc] = "api adhoc"

    # the CLI, on the database from another process: the server owns the children
    cli_sid = _schedule(server, "trap-cli", trap, tmp_path / "c", "exit")
    run = _start_scheduled(server, cli_sid)
    _child_pid(tmp_path / "c")
    done = _cli(server, "schedule", "cancel", run)
    assert done.returncode == 0, done.stderr
    cancelled[run] = "cli scheduled"
    adhoc = _start_adhoc(server, trap, tmp_path / "d", "exit")
    _child_pid(tmp_path / "d")
    queued = _start_adhoc(server, trap, tmp_path / "cq", "exit")  # behind the cap of 1
    assert _status(server, queued)["status"] == "queued"
    done = _cli(server, "schedule", "cancel", queued)
    assert done.returncode == 0, done.stderr
    cancelled[queued] = "cli queued"
    done = _cli(server, "schedule", "cancel", adhoc)
    assert done.returncode == 0, done.stderr
    cancelled[adhoc] = "cli adhoc"

    for run_id in cancelled:
        assert _status(server, run_id)["status_reason_code"] == "run.cancelled.operator"
    wait_for(lambda: _cancelled_total(server) == len(cancelled), timeout=30)
    lines = wait_for(
        lambda: (found := _outcome_lines(server)) and len(found) >= len(cancelled) and found,
        timeout=30,
    )
    by_run = {line["run_id"]: line for line in lines}
    assert set(by_run) == set(cancelled), (by_run, cancelled)
    for run_id, line in by_run.items():
        assert line["status"] == "cancelled", (cancelled[run_id], line)
        assert line["reason_code"] == "run.cancelled.operator", (cancelled[run_id], line)
    assert len(lines) == len(cancelled)  # once each, whichever process cancelled
    assert _cancelled_total(server) == len(cancelled)


def test_cancel_gives_a_child_that_ignores_sigterm_the_full_grace(
    studio_process: Any, tmp_path: Path
) -> None:
    server = studio_process()
    server.start()
    trap = write_script(tmp_path, "trap.py", TRAP)
    sid = _schedule(server, "stubborn", trap, tmp_path / "s", "ignore")

    run = _start_scheduled(server, sid)
    pid = _child_pid(tmp_path / "s")
    assert server.request("POST", f"/api/schedules/runs/{run}/cancel").status_code == 202
    assert 4.0 <= _gone_after_term(tmp_path / "s", pid) <= 20.0

    adhoc = _start_adhoc(server, trap, tmp_path / "a", "ignore")
    pid = _child_pid(tmp_path / "a")
    assert server.request("POST", f"/api/schedules/runs/{adhoc}/cancel").status_code == 202
    assert 4.0 <= _gone_after_term(tmp_path / "a", pid) <= 20.0

    adhoc = _start_adhoc(server, trap, tmp_path / "c", "ignore")
    pid = _child_pid(tmp_path / "c")
    assert _cli(server, "schedule", "cancel", adhoc).returncode == 0
    assert 4.0 <= _gone_after_term(tmp_path / "c", pid) <= 20.0


def test_cancel_ends_a_child_that_exits_on_sigterm_promptly(
    studio_process: Any, tmp_path: Path
) -> None:
    server = studio_process()
    server.start()
    trap = write_script(tmp_path, "trap.py", TRAP)
    adhoc = _start_adhoc(server, trap, tmp_path / "a", "exit")
    pid = _child_pid(tmp_path / "a")
    assert server.request("POST", f"/api/schedules/runs/{adhoc}/cancel").status_code == 202
    assert _gone_after_term(tmp_path / "a", pid) < 3.0
