"""Storage faults under load, made with real file systems (root only) and a real `studio
serve` running children: runs whose children end while the disk is full are recorded once it
has space again and writes land again without a restart; a fault is logged as one line naming
it, never a traceback; a ``-wal`` file deleted under the server stops its writes."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import count, write_script

from studio_state.testing import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting file systems needs root"),
]

EXT4_IOC_SHUTDOWN = 0x8004587D
EXT4_GOING_FLAGS_NOLOGFLUSH = 2

# Says it started, waits for the go file, prints, says it ends (markers outside the disk).
WAITING_CHILD = textwrap.dedent(
    """
    import os, sys, time
    started, go, ended = sys.argv[1], sys.argv[2], sys.argv[3]
    print("started", flush=True)
    open(started, "w").close()
    while not os.path.exists(go):
        time.sleep(0.05)
    print("x" * 10000, flush=True)
    open(ended, "w").close()
    """
)
BIG = "d" * 20_000  # a row that needs new space on the disk
QUICK_CHILD = "print('hello ' * 300)\n"


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


@contextlib.contextmanager
def _mounted(target: Path, *argv: str) -> Iterator[Path]:
    target.mkdir(parents=True, exist_ok=True)
    _run("mount", *argv, str(target))
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True, timeout=60)


@pytest.fixture
def ext4_disk(tmp_path: Path) -> Iterator[Path]:
    """A small ext4 file system on a loop image (it fills up, turns read-only, shuts down)."""
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("mkfs.ext4 is not installed")
    image = tmp_path / "fs.img"
    with image.open("wb") as handle:
        handle.truncate(32 * 1024 * 1024)
    _run("mkfs.ext4", "-q", "-F", str(image))
    with _mounted(tmp_path / "ext4", "-o", "loop,errors=remount-ro", str(image)) as where:
        yield where


def _fill(where: Path) -> Path:
    """Fill the file system ``where`` up to ENOSPC; the file to delete to give space back."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 65536)
    finally:
        os.close(fd)
    return filler


def _command(server: Any, script: Path, *args: str) -> dict[str, Any]:
    return {
        "action_kind": "command",
        "action_command": "python3",
        "action_command_args": [str(script), *args],
        "action_cwd": str(server.base),
    }


def _every_second(server: Any, name: str) -> str:
    quick = write_script(server.base, "quick.py", QUICK_CHILD)
    body = {"name": name, "trigger_type": "interval", "interval_sec": 1, **_command(server, quick)}
    created = server.request("POST", "/api/schedules", json=body)
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def _waiting_runs(server: Any, n: int) -> tuple[list[str], Path]:
    """``n`` ad-hoc runs whose children wait for the returned go file."""
    child = write_script(server.base, "child.py", WAITING_CHILD)
    go = server.base / "go"
    runs = []
    for i in range(n):
        marks = [str(server.base / f"{what}-{i}") for what in ("started", "go", "ended")]
        marks[1] = str(go)
        answer = server.request("POST", "/api/runs", json=_command(server, child, *marks))
        assert answer.status_code == 202, answer.text
        runs.append(str(answer.json()["run_id"]))
    wait_for(
        lambda: all((server.base / f"started-{i}").exists() for i in range(n)),
        what="the children started",
    )
    return runs, go


def _traceback_free(log: str) -> None:
    assert "Traceback" not in log, log
    assert "unexpected error on" not in log and "internal server error" not in log, log


def _agent_schedule(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "trigger_type": "interval",
        "interval_sec": 3600,
        "action_kind": "agent",
        "action_prompt": "p",
    }


def _fault_lines(log: str, words: str) -> list[str]:
    return [line for line in log.splitlines() if words in line and "storage fault" in line]


@pytest.mark.parametrize("temp", ["temp-elsewhere", "temp-on-the-disk"])
def test_runs_ending_on_a_full_disk_are_recorded_and_writes_recover_without_restart(
    studio_process: Any, ext4_disk: Path, temp: str
) -> None:
    # One disk for everything (a small machine): SQLite's temporary files (statement
    # journals of savepoints) fill up with it.
    env = {"SQLITE_TMPDIR": str(ext4_disk)} if temp == "temp-on-the-disk" else None
    server = studio_process(db=ext4_disk / "state.db", env=env)
    server.start()
    _every_second(server, "every-second")
    runs, go = _waiting_runs(server, 4)
    filler = _fill(ext4_disk)
    wait_for(
        lambda: (server.health() or {}).get("status") == "degraded",
        timeout=30,
        what="health degraded on the full disk",
    )
    go.touch()  # the children end while the disk is full
    wait_for(
        lambda: all((server.base / f"ended-{i}").exists() for i in range(4)),
        what="the children ended",
    )
    marks = ",".join("?" * len(runs))
    still = f"SELECT id FROM schedule_runs WHERE id IN ({marks}) AND status = 'running'"
    time.sleep(3)  # ticks and terminal-write retries on the full disk
    # An end may still land in space the write-ahead log already has; the others wait.
    refused = server.request(
        "POST", "/api/schedules", json=_agent_schedule("while-full") | {"action_prompt": BIG}
    )
    assert refused.status_code == 503 and "disk" in refused.json()["detail"], refused.text
    health = server.health()
    assert health is not None and health["status"] == "degraded", health

    filler.unlink()  # space comes back: no restart
    wait_for(
        lambda: (server.health() or {}).get("status") == "ok",
        timeout=30,
        what="health ok once the disk has space again",
    )
    after = server.request("POST", "/api/schedules", json=_agent_schedule("after"))
    assert after.status_code == 201, after.text
    wait_for(lambda: not server.rows(still, tuple(runs)), timeout=30, what="the ends recorded")
    ended = server.rows(
        f"SELECT id, status, status_reason_code FROM schedule_runs WHERE id IN ({marks})",
        tuple(runs),
    )
    assert {(r["status"], r["status_reason_code"]) for r in ended} == {
        ("completed", "run.completed.ok")
    }, ended
    for run_id in runs:  # each end with its transition row
        last = server.rows(
            "SELECT status FROM status_transitions WHERE entity_type = 'schedule_run' "
            "AND entity_id = ? ORDER BY created_at DESC, rowid DESC LIMIT 1",
            (run_id,),
        )
        assert last == [{"status": "completed"}], (run_id, last)
    assert server.stop() in (0, -15)
    log = server.log()
    _traceback_free(log)
    # The fault starts once and ends once: no flapping while the disk is still full.
    assert log.count("storage writable again") == 1, log
    for run_id in runs:  # a failed terminal write is logged once, not once per attempt
        assert log.count(f"terminal write of run {run_id} (completed) failed") <= 1, log
    count("faults_survived")


@pytest.mark.parametrize("fault", ["read-only", "I/O error"])
def test_storage_faults_under_load_log_one_line_naming_the_fault(
    studio_process: Any, ext4_disk: Path, fault: str
) -> None:
    server = studio_process(db=ext4_disk / "state.db")
    server.start()
    _every_second(server, "every-second")
    runs, go = _waiting_runs(server, 2)
    if fault == "read-only":
        device = Path(
            subprocess.run(
                ["findmnt", "-n", "-o", "SOURCE", str(ext4_disk)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        ).name
        Path(f"/sys/fs/ext4/{device}/trigger_fs_error").write_text("studio test fault\n")
    else:
        fd = os.open(ext4_disk, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)
    go.touch()  # runs end, schedules fire, requests write: all on the faulty file system
    for i in range(5):
        answer = server.request("POST", "/api/schedules", json=_agent_schedule(f"f-{i}"))
        assert answer.status_code == 503, answer.text
        queued = server.request("POST", "/api/runs", json=_agent_schedule("x") | {"name": None})
        assert queued.status_code in (422, 503), queued.text
        time.sleep(1)
    health = server.health()
    assert health is not None and health["status"] == "degraded", health
    server.stop()
    log = server.log()
    _traceback_free(log)
    named = "read-only file system" if fault == "read-only" else "I/O error"
    assert _fault_lines(log, named), log
    count("faults_survived")


def _deleted_wal_size(pid: int, wal: Path) -> int | None:
    """The size of the ``-wal`` file the server still holds open after it was deleted."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == f"{wal} (deleted)":
                return os.stat(f"/proc/{pid}/fd/{fd}").st_size
    return None


def test_a_deleted_wal_file_stops_writes_and_degrades_health(studio_process: Any) -> None:
    server = studio_process()
    server.start()
    _every_second(server, "every-second")  # the engine writes every second
    (waiting,), go = _waiting_runs(server, 1)  # and will write this run's end
    wal = Path(f"{server.db}-wal")
    wal.unlink()
    health = wait_for(
        lambda: (h := server.health()) and h["status"] == "degraded" and h,
        timeout=30,
        what="health reports the deleted write-ahead log",
    )
    problem = health["scheduler"]["last_tick_error"]
    assert "wal replaced" in problem and str(wal) in problem, problem
    refused = server.request("POST", "/api/schedules", json=_agent_schedule("after"))
    assert refused.status_code == 503 and str(wal) in refused.json()["detail"], refused.text
    # Another process writes meanwhile (it starts a new log at the path).
    cli = subprocess.run(
        [sys.executable, "-m", "studio_cli", "schedule", "create", "from-cli"]
        + ["--interval", "1h", "--command", "python3", "--command-arg", "quick.py"],
        capture_output=True,
        text=True,
        env={**server.env, "LIONAGI_STUDIO_DB": str(server.db)},
        cwd=server.base,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    # SQLite may refuse it (the shared index names frames the new log lacks): one line then.
    assert cli.returncode == 0 or cli.stderr.startswith("error: "), cli.stderr
    assert "Traceback" not in cli.stderr
    # No further write from the server: the log it still holds open stops growing, though a
    # schedule is due every second and a run ends.
    held = _deleted_wal_size(server.pid, wal)
    assert held is not None
    go.touch()
    wait_for(lambda: (server.base / "ended-0").exists(), what="the child ended")
    time.sleep(3)
    assert _deleted_wal_size(server.pid, wal) == held
    assert server.health()["status"] == "degraded"
    log = server.log()
    assert log.count(problem) == 1, log  # one line, not one per tick
    _traceback_free(log)
    assert server.stop() in (0, -15)
    with contextlib.closing(sqlite3.connect(server.db)) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        names = {row[0] for row in db.execute("SELECT name FROM schedules")}
        (status,) = db.execute(
            "SELECT status FROM schedule_runs WHERE id = ?", (waiting,)
        ).fetchone()
    assert "every-second" in names and ("from-cli" in names) == (cli.returncode == 0)
    assert status == "running"  # its end was not written: the next start reconciles it
    count("faults_survived")
