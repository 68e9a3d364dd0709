"""Storage faults under a running `studio serve`, made with real file systems (root only): a
disk that fills up (a small tmpfs), a file system that turns read-only mid-run (ext4 on a loop
image, errors=remount-ro, an error triggered through sysfs) and one whose device stops
answering (ext4 shut down: I/O errors, then reads of a corrupt image). Every request answers
503 naming the problem, never 500; health says ``degraded`` while writes fail and ``ok`` once
they land again; nothing acknowledged is lost."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import count

from studio_state.testing import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting file systems needs root"),
]

EXT4_IOC_SHUTDOWN = 0x8004587D
EXT4_GOING_FLAGS_NOLOGFLUSH = 2


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


@contextlib.contextmanager
def _mounted(target: Path, *argv: str) -> Iterator[Path]:
    target.mkdir(parents=True, exist_ok=True)
    _run("mount", *argv, str(target))
    try:
        yield target
    finally:
        # lazy: a file system shut down or a server killed mid-write may still be busy
        subprocess.run(["umount", "-l", str(target)], capture_output=True, timeout=60)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    with _mounted(tmp_path / "tmpfs", "-t", "tmpfs", "-o", "size=6m", "tmpfs") as where:
        yield where


@pytest.fixture
def ext4_image(tmp_path: Path) -> Iterator[Path]:
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("mkfs.ext4 is not installed")
    image = tmp_path / "fs.img"
    with image.open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)
    _run("mkfs.ext4", "-q", "-F", str(image))
    with _mounted(tmp_path / "ext4", "-o", "loop,errors=remount-ro", str(image)) as where:
        yield where


def _schedule(name: str, prompt: str = "p") -> dict[str, Any]:
    return {
        "name": name,
        "trigger_type": "interval",
        "interval_sec": 3600,
        "action_kind": "agent",
        "action_prompt": prompt,
    }


def _assert_no_500_logged(log: str) -> None:
    assert "unexpected error on" not in log, log
    assert "database error on" not in log, log
    assert "internal server error" not in log, log
    assert "Traceback" not in log, log


def test_disk_full_answers_503_and_health_degraded_until_space_returns(
    studio_process: Any, small_tmpfs: Path
) -> None:
    server = studio_process(db=small_tmpfs / "state.db")
    server.start()
    acknowledged = []
    first = server.request("POST", "/api/schedules", json=_schedule("before"))
    assert first.status_code == 201, first.text
    acknowledged.append("before")
    filler = small_tmpfs / "filler"
    with filler.open("wb") as handle, contextlib.suppress(OSError):
        while True:  # until ENOSPC
            handle.write(b"\0" * 65536)
            handle.flush()
    statuses = []
    refused = None
    for i in range(60):  # rows big enough that the write-ahead log must grow
        answer = server.request(
            "POST", "/api/schedules", json=_schedule(f"full-{i}", "d" * 100_000)
        )
        statuses.append(answer.status_code)
        if answer.status_code == 201:
            acknowledged.append(f"full-{i}")
        elif answer.status_code == 503:
            refused = answer
            break
    assert refused is not None, statuses
    assert set(statuses) <= {201, 503}, statuses
    assert "disk is full" in refused.json()["detail"], refused.json()
    health = server.health()
    assert health["status"] == "degraded"
    assert "disk is full" in health["database"]["problem"]
    # reads still answer
    listed = server.request("GET", "/api/schedules")
    assert listed.status_code == 200
    # space comes back: health recovers without a restart, writes land again
    filler.unlink()
    wait_for(
        lambda: (server.health() or {}).get("status") == "ok",
        timeout=30,
        what="health ok once the disk has space",
    )
    after = server.request("POST", "/api/schedules", json=_schedule("after"))
    assert after.status_code == 201, after.text
    acknowledged.append("after")
    assert server.stop() in (0, -15)
    names = {row["name"] for row in server.rows("SELECT name FROM schedules")}
    assert set(acknowledged) <= names, "an acknowledged schedule was lost"
    _assert_no_500_logged(server.log())
    count("faults_survived")


def test_a_file_system_turning_read_only_mid_run_answers_503(
    studio_process: Any, ext4_image: Path
) -> None:
    server = studio_process(db=ext4_image / "state.db")
    server.start()
    created = server.request("POST", "/api/schedules", json=_schedule("before"))
    assert created.status_code == 201, created.text
    device = Path(
        subprocess.run(
            ["findmnt", "-n", "-o", "SOURCE", str(ext4_image)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    ).name
    Path(f"/sys/fs/ext4/{device}/trigger_fs_error").write_text("studio test fault\n")
    answers = [
        server.request("POST", "/api/schedules", json=_schedule(f"ro-{i}")) for i in range(5)
    ]
    assert [a.status_code for a in answers] == [503] * 5, [a.text for a in answers]
    assert "read-only" in answers[0].json()["detail"], answers[0].json()
    assert answers[0].headers.get("retry-after")
    health = server.health()
    assert health["status"] == "degraded"
    assert "read-only" in health["database"]["problem"]
    listed = server.request("GET", "/api/schedules")
    assert listed.status_code == 200 and listed.json()["total"] == 1
    server.stop()
    _assert_no_500_logged(server.log())
    count("faults_survived")


def test_a_device_that_stops_answering_gives_503_on_every_route(
    studio_process: Any, ext4_image: Path
) -> None:
    server = studio_process(db=ext4_image / "state.db")
    server.start()
    created = server.request("POST", "/api/schedules", json=_schedule("before"))
    assert created.status_code == 201, created.text
    schedule_id = created.json()["id"]
    fd = os.open(ext4_image, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
    finally:
        os.close(fd)
    routes = [
        ("POST", "/api/schedules", {"json": _schedule("after")}),
        ("PATCH", f"/api/schedules/{schedule_id}", {"json": {"description": "x"}}),
        ("POST", f"/api/schedules/{schedule_id}/disable", {}),
        ("GET", "/api/schedules", {}),
        ("GET", f"/api/schedules/{schedule_id}", {}),
        ("GET", "/api/dispatch", {}),
        ("POST", "/api/runs", {"json": {"action_kind": "agent", "action_prompt": "p"}}),
    ]
    for method, path, kwargs in routes:
        answer = server.request(method, path, **kwargs)
        if method == "GET" and answer.status_code == 200:
            continue  # a read the page cache still answers
        assert answer.status_code == 503, (method, path, answer.status_code, answer.text)
        assert "storage fault" in answer.json()["detail"], answer.json()
    health = server.health()
    assert health["status"] == "degraded" and health["database"]["problem"]
    server.stop()
    _assert_no_500_logged(server.log())
    count("faults_survived")
