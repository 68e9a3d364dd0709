"""spawn_and_wait with real child processes: I/O, environment, exit, teardown, exec failures."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from studio_launcher import (
    MAX_ARGUMENT_BYTES,
    DeadlineExceeded,
    InvalidAction,
    LaunchError,
    SpawnFailed,
    build_argv,
    spawn_and_wait,
)
from studio_launcher.testing import eventually, kill_quietly, pid_alive

PY = sys.executable


def py(code: str, *args: str) -> list[str]:
    return [PY, "-c", code, *args]


async def test_exit_codes() -> None:
    assert await spawn_and_wait(py("pass"), "inv000000001") == (0, "")
    code, _ = await spawn_and_wait(py("import sys; sys.exit(3)"), "inv000000001")
    assert code == 3
    code, _ = await spawn_and_wait(py("import os; os.kill(os.getpid(), 9)"), "inv000000001")
    assert code == -signal.SIGKILL


async def test_stderr_tail_is_the_last_2048_bytes() -> None:
    code = (
        "import sys\n"
        "sys.stderr.write('HEAD' + 'x' * 10000)\n"
        "sys.stderr.write(''.join(chr(65 + i % 26) for i in range(2044)) + 'TAIL')\n"
    )
    exit_code, tail = await spawn_and_wait(py(code), "inv000000001")
    assert exit_code == 0
    expected = "".join(chr(65 + i % 26) for i in range(2044)) + "TAIL"
    assert tail == expected
    assert len(tail.encode()) == 2048


async def test_short_stderr_is_returned_whole_and_decoded_with_replacement() -> None:
    code = "import sys; sys.stderr.buffer.write(b'bad \\xff byte, caf\\xc3\\xa9')"
    _, tail = await spawn_and_wait(py(code), "inv000000001")
    assert tail == "bad \ufffd byte, café"


async def test_stdout_is_not_captured_and_stdin_is_dev_null(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    code = """
import json, os, sys
print("STDOUT-MARKER", flush=True)
null = os.stat(os.devnull)
def same(fd):
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino, st.st_rdev) == (null.st_dev, null.st_ino, null.st_rdev)
data = sys.stdin.read()
report = {"stdin_null": same(0), "stdout_null": same(1), "stdin_data": data}
json.dump(report, open(sys.argv[1], "w"))
sys.stderr.write("STDERR-MARKER")
"""
    # Give this process a stdin with data and a stdout that is a real file, so that inheriting
    # either would show.
    feed = tmp_path / "stdin.txt"
    feed.write_text("data the child must not see")
    out = tmp_path / "stdout.txt"
    saved = os.dup(0), os.dup(1)
    with open(feed, "rb") as stdin_file, open(out, "wb") as stdout_file:
        os.dup2(stdin_file.fileno(), 0)
        os.dup2(stdout_file.fileno(), 1)
        try:
            exit_code, tail = await spawn_and_wait(py(code, str(report)), "inv000000001")
        finally:
            os.dup2(saved[0], 0)
            os.dup2(saved[1], 1)
            os.close(saved[0])
            os.close(saved[1])
    assert exit_code == 0
    assert tail == "STDERR-MARKER"
    assert out.read_bytes() == b""
    assert json.loads(report.read_text()) == {
        "stdin_null": True,
        "stdout_null": True,
        "stdin_data": "",
    }


async def test_child_leads_a_new_session_without_a_shell(tmp_path: Path) -> None:
    report = tmp_path / "ids.json"
    code = """
import json, os, sys
json.dump({"pid": os.getpid(), "pgid": os.getpgrp(), "sid": os.getsid(0), "ppid": os.getppid()},
          open(sys.argv[1], "w"))
"""
    await spawn_and_wait(py(code, str(report), "$HOME;|&"), "inv000000001")
    ids = json.loads(report.read_text())
    assert ids["pgid"] == ids["pid"] == ids["sid"]
    assert ids["ppid"] == os.getpid()  # exec'd directly: no shell in between
    assert os.getsid(0) != ids["sid"]


async def test_env_default_is_the_parents_plus_invocation_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STUDIO_LAUNCHER_TEST_PARENT_VAR", "parent-value")
    monkeypatch.setenv("LIONAGI_INVOCATION_ID", "stale-parent-value")
    report = tmp_path / "env.json"
    code = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
    await spawn_and_wait(py(code, str(report)), "abc123def456")
    env = json.loads(report.read_text())
    assert env["STUDIO_LAUNCHER_TEST_PARENT_VAR"] == "parent-value"
    assert env["LIONAGI_INVOCATION_ID"] == "abc123def456"


async def test_env_given_replaces_the_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STUDIO_LAUNCHER_TEST_PARENT_VAR", "parent-value")
    report = tmp_path / "env.json"
    code = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
    given = {"LIONAGI_STUDIO_DB": "/data/state.db", "ONLY": "this", "LIONAGI_INVOCATION_ID": "x"}
    await spawn_and_wait(py(code, str(report)), "abc123def456", env=given)
    env = json.loads(report.read_text())
    env.pop("LC_CTYPE", None)  # the interpreter may coerce the C locale
    assert env == {
        "LIONAGI_STUDIO_DB": "/data/state.db",
        "ONLY": "this",
        "LIONAGI_INVOCATION_ID": "abc123def456",
    }
    assert given["LIONAGI_INVOCATION_ID"] == "x"  # the caller's dict is not modified


async def test_cwd_is_applied(tmp_path: Path) -> None:
    report = tmp_path / "cwd.txt"
    work = tmp_path / "work"
    work.mkdir()
    await spawn_and_wait(
        py("import os, sys; open(sys.argv[1], 'w').write(os.getcwd())", str(report)),
        "i",
        cwd=str(work),
    )
    assert report.read_text() == str(work)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_on_spawn_receives_the_child_pid(kind: str, tmp_path: Path) -> None:
    report = tmp_path / "pid.txt"
    seen: list[int] = []

    def sync_hook(pid: int) -> None:
        seen.append(pid)

    async def async_hook(pid: int) -> None:
        await asyncio.sleep(0)
        seen.append(pid)

    hook = sync_hook if kind == "sync" else async_hook
    code = "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid()))"
    await spawn_and_wait(py(code, str(report)), "i", on_spawn=hook)
    assert seen == [int(report.read_text())]


async def test_on_spawn_failure_is_logged_and_the_run_continues(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(pid: int) -> None:
        raise RuntimeError("bookkeeping failed")

    assert await spawn_and_wait(py("import sys; sys.exit(4)"), "i", on_spawn=broken) == (4, "")
    assert "bookkeeping failed" in caplog.text


async def test_grandchild_holding_stderr_does_not_block(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    code = """
import subprocess, sys
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                     stdin=subprocess.DEVNULL)
open(sys.argv[1], "w").write(str(g.pid))
sys.stderr.write("leader done")
"""
    try:
        started = time.monotonic()
        exit_code, tail = await asyncio.wait_for(spawn_and_wait(py(code, str(pid_file)), "i"), 30)
        assert time.monotonic() - started < 30
        assert (exit_code, tail) == (0, "leader done")
        grandchild = int(pid_file.read_text())
        assert pid_alive(grandchild)  # it really was still holding the pipe
    finally:
        if pid_file.exists():
            kill_quietly(int(pid_file.read_text()))


FAMILY = """
import os, signal, subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", sys.argv[2]], stdin=subprocess.DEVNULL)
open(sys.argv[1], "w").write(f"{os.getpid()} {g.pid}")
time.sleep(60)
"""


async def _start_family(
    tmp_path: Path,
    grandchild_code: str = "import time; time.sleep(60)",
    **kw: object,
) -> tuple[asyncio.Task[tuple[int, str]], list[int]]:
    pid_file = tmp_path / "family.pids"
    task = asyncio.create_task(
        spawn_and_wait(py(FAMILY, str(pid_file), grandchild_code), "i", **kw)
    )  # type: ignore[arg-type]
    assert await eventually(lambda: pid_file.exists() and " " in pid_file.read_text(), 30)
    return task, [int(p) for p in pid_file.read_text().split()]


async def test_cancellation_kills_child_and_grandchild(tmp_path: Path) -> None:
    task, pids = await _start_family(tmp_path)
    try:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await eventually(lambda: all(not pid_alive(p) for p in pids), 10)
    finally:
        for pid in pids:
            kill_quietly(pid)


async def test_deadline_terminates_the_group_and_raises(tmp_path: Path) -> None:
    pid_file = tmp_path / "family.pids"
    code = FAMILY.replace(
        "time.sleep(60)\n",
        "sys.stderr.write('partial output'); sys.stderr.flush(); time.sleep(60)\n",
    )
    pids: list[int] = []
    try:
        with pytest.raises(DeadlineExceeded) as info:
            await spawn_and_wait(
                py(code, str(pid_file), "import time; time.sleep(60)"),
                "inv-deadline",
                deadline_seconds=2.0,
            )
        pids = [int(p) for p in pid_file.read_text().split()]
        assert await eventually(lambda: all(not pid_alive(p) for p in pids), 10)
        err = info.value
        assert isinstance(err, TimeoutError) and isinstance(err, LaunchError)
        assert (err.invocation_id, err.deadline_seconds) == ("inv-deadline", 2.0)
        assert err.stderr_tail == "partial output"
        assert "inv-deadline" in str(err)
    finally:
        for pid in pids:
            kill_quietly(pid)


async def test_child_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    marker = tmp_path / "got-term"
    ready = tmp_path / "ready"
    code = """
import os, signal, sys, time
def on_term(signum, frame):
    open(sys.argv[1], "w").write("TERM")
signal.signal(signal.SIGTERM, on_term)
open(sys.argv[2], "w").write(str(os.getpid()))
while True:
    time.sleep(0.1)
"""
    task = asyncio.create_task(spawn_and_wait(py(code, str(marker), str(ready)), "i"))
    assert await eventually(lambda: ready.exists() and ready.read_text() != "", 30)
    pid = int(ready.read_text())
    try:
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        elapsed = time.monotonic() - started
        assert marker.read_text() == "TERM"  # SIGTERM came first ...
        assert elapsed >= 4.0  # ... then the 5 s grace ...
        assert elapsed < 60
        assert not pid_alive(pid)  # ... then SIGKILL
    finally:
        kill_quietly(pid)


async def test_spawn_failed_missing_executable(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-li")
    with pytest.raises(SpawnFailed) as info:
        await spawn_and_wait([missing, "agent"], "i")
    assert info.value.errno == errno.ENOENT
    assert "No such file or directory" in str(info.value)
    assert missing in str(info.value)
    assert isinstance(info.value, LaunchError)


async def test_spawn_failed_permission(tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    with pytest.raises(SpawnFailed) as info:
        await spawn_and_wait([str(script)], "i")
    assert info.value.errno == errno.EACCES
    assert "Permission denied" in str(info.value)


async def test_spawn_failed_over_long_argument() -> None:
    with pytest.raises(SpawnFailed) as info:
        await spawn_and_wait(py("pass", "x" * (MAX_ARGUMENT_BYTES + 1)), "i")
    assert info.value.errno == errno.E2BIG
    assert "Argument list too long" in str(info.value)
    # and the largest argument the validation lets through does run
    assert await spawn_and_wait(py("pass", "x" * MAX_ARGUMENT_BYTES), "i") == (0, "")


async def test_spawn_failed_missing_cwd(tmp_path: Path) -> None:
    gone = tmp_path / "deleted-after-resolution"
    with pytest.raises(SpawnFailed) as info:
        await spawn_and_wait(py("pass"), "i", cwd=str(gone))
    assert info.value.errno == errno.ENOENT
    assert str(gone) in str(info.value)


async def test_spawn_failed_embedded_nul() -> None:
    with pytest.raises(SpawnFailed, match="null"):
        await spawn_and_wait(py("pass", "a\x00b"), "i")


async def test_flow_yaml_temp_file_removed_after_the_run(prefix: list[str], tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    argv, tmp = build_argv(
        {"action_kind": "flow_yaml", "action_flow_yaml": "steps: []  # exit=5"},
        {},
        executable_prefix=prefix,
    )
    assert tmp is not None and Path(tmp).exists()
    code, _ = await spawn_and_wait(
        argv, "i", tmp_path=tmp, env={**os.environ, "FAKE_LI_LOG": str(log)}
    )
    assert code == 5  # the child read the file: the exit token came from the YAML
    assert not Path(tmp).exists()


async def test_flow_yaml_temp_file_removed_when_spawn_fails(tmp_path: Path) -> None:
    argv, tmp = build_argv(
        {"action_kind": "flow_yaml", "action_flow_yaml": "a: 1"},
        {},
        executable_prefix=[str(tmp_path / "missing-li")],
    )
    assert tmp is not None and Path(tmp).exists()
    with pytest.raises(SpawnFailed):
        await spawn_and_wait(argv, "i", tmp_path=tmp)
    assert not Path(tmp).exists()


async def test_temp_file_removed_on_cancellation_and_bad_input(tmp_path: Path) -> None:
    tmp = tmp_path / "flow.yaml"
    tmp.write_text("a: 1")
    ready = tmp_path / "ready"
    task = asyncio.create_task(
        spawn_and_wait(
            py("import sys, time; open(sys.argv[1], 'w').close(); time.sleep(60)", str(ready)),
            "i",
            tmp_path=str(tmp),
        )
    )
    assert await eventually(ready.exists, 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not tmp.exists()

    tmp.write_text("a: 1")
    with pytest.raises(InvalidAction) as info:
        await spawn_and_wait(py("pass"), "i", tmp_path=str(tmp), deadline_seconds=-1)
    assert info.value.field == "deadline_seconds"
    assert not tmp.exists()


@pytest.mark.parametrize(
    ("argv", "invocation_id", "kwargs", "field"),
    [
        ([], "i", {}, "argv"),
        ("python -c pass", "i", {}, "argv"),
        ([PY, 3], "i", {}, "argv"),
        ([PY], "", {}, "invocation_id"),
        ([PY], "i", {"env": {"A": 1}}, "env"),
        ([PY], "i", {"deadline_seconds": 0}, "deadline_seconds"),
        ([PY], "i", {"deadline_seconds": float("nan")}, "deadline_seconds"),
        ([PY], "i", {"deadline_seconds": True}, "deadline_seconds"),
    ],
)
async def test_bad_arguments_are_refused_before_spawn(
    argv: object, invocation_id: str, kwargs: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidAction) as info:
        await spawn_and_wait(argv, invocation_id, **kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


async def test_many_concurrent_children(tmp_path: Path) -> None:
    code = "import sys; sys.stderr.write(sys.argv[1]); sys.exit(int(sys.argv[1]) % 7)"
    results = await asyncio.gather(
        *(spawn_and_wait(py(code, str(n)), f"inv{n}") for n in range(12))
    )
    assert results == [(n % 7, str(n)) for n in range(12)]
