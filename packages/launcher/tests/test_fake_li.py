"""studio_launcher.testing.write_fake_li: the `li` stand-in other packages' tests steer."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from studio_launcher import build_argv, resolve_li_executable, spawn_and_wait
from studio_launcher.testing import kill_quietly, pid_alive

SESSIONS_DDL = """
CREATE TABLE sessions (id TEXT PRIMARY KEY, invocation_id TEXT, status TEXT, input_tokens INTEGER,
  output_tokens INTEGER, total_cost_usd REAL, started_at REAL, ended_at REAL, created_at REAL)
"""


def _run(
    li: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(li), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def _log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_script_is_executable_with_this_interpreter(fake_li: Path) -> None:
    assert fake_li.name == "li"
    assert fake_li.stat().st_mode & stat.S_IXUSR
    assert fake_li.read_text().splitlines()[0] == f"#!{sys.executable}"
    assert resolve_li_executable(configured=str(fake_li)) == ([str(fake_li)], None)


KINDS: list[dict[str, Any]] = [
    {
        "action_kind": "agent",
        "action_model": "m",
        "action_agent": "a",
        "action_project": "p",
        "action_prompt": "hi",
    },
    {"action_kind": "agent", "action_agent": "a", "action_prompt": "hi"},
    {"action_kind": "flow", "action_model": "m", "action_project": "p", "action_prompt": "hi"},
    {"action_kind": "fanout", "action_model": "m", "action_prompt": "hi"},
    {"action_kind": "play", "action_playbook": "nightly", "action_prompt": "hi"},
    {"action_kind": "playbook", "action_playbook": "nightly"},
    {"action_kind": "flow_yaml", "action_flow_yaml": "name: x\n", "action_project": "p"},
    {
        "action_kind": "engine",
        "action_agent": "coding",
        "action_model": "m",
        "action_prompt": "spec",
        "action_engine_options": {"max_depth": 2, "test_cmd": "pytest -q"},
    },
]


@pytest.mark.parametrize("schedule", KINDS, ids=[s["action_kind"] for s in KINDS])
async def test_accepts_every_argv_shape(
    schedule: dict[str, Any], prefix: list[str], tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    argv, tmp = build_argv(schedule, {}, executable_prefix=prefix)
    env = {**os.environ, "FAKE_LI_LOG": str(log), "LIONAGI_STUDIO_DB": "/nowhere/state.db"}
    code, tail = await spawn_and_wait(
        argv, "inv123456789", tmp_path=tmp, cwd=str(tmp_path), env=env
    )
    assert (code, tail) == (0, "")
    [entry] = _log(log)
    assert entry["argv"] == argv[1:]
    assert entry["cwd"] == str(tmp_path)
    assert entry["invocation_id"] == "inv123456789"
    assert entry["studio_db"] == "/nowhere/state.db"
    if schedule.get("action_prompt") and schedule["action_kind"] != "engine":
        assert entry["prompt"] == "hi"


def test_prompt_tokens_steer_exit_and_stderr(fake_li: Path) -> None:
    result = _run(fake_li, "agent", "--", "m", "do it exit=7 stderr=first stderr=second")
    assert result.returncode == 7
    assert result.stderr == "first\nsecond\n"
    assert result.stdout == ""


async def test_sleep_token_and_term_ignore(fake_li: Path) -> None:
    import asyncio
    import signal

    task = asyncio.create_task(spawn_and_wait([str(fake_li), "agent", "--", "m", "sleep=30"], "i"))
    await asyncio.sleep(0.5)
    assert not task.done()  # still sleeping
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    child = subprocess.Popen(
        [str(fake_li), "agent", "--", "m", "term=ignore sleep=30"], start_new_session=True
    )
    try:
        await asyncio.sleep(0.5)  # let it install the handler
        os.kill(child.pid, signal.SIGTERM)
        await asyncio.sleep(0.3)
        assert child.poll() is None  # SIGTERM ignored
    finally:
        child.kill()
        child.wait()


async def test_grandchild_token(fake_li: Path, tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    env = {**os.environ, "FAKE_LI_LOG": str(log)}
    argv = [str(fake_li), "o", "flow", "--", "m", "grandchild=30"]
    code, _ = await spawn_and_wait(argv, "i", env=env)
    [entry] = _log(log)
    try:
        assert code == 0
        assert entry["grandchild_pid"] and pid_alive(entry["grandchild_pid"])
        assert os.getpgid(entry["grandchild_pid"]) == entry["pid"]  # same process group
    finally:
        kill_quietly(entry["grandchild_pid"])


async def test_setsid_and_stdout_tokens(fake_li: Path, tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    run_log = tmp_path / "run.log"
    env = {**os.environ, "FAKE_LI_LOG": str(log)}
    argv = [str(fake_li), "o", "flow", "--", "m", "setsid=30 stdout=hello stderr=bye"]
    code, tail = await spawn_and_wait(argv, "i", env=env, log_path=run_log)
    [entry] = _log(log)
    try:
        assert (code, tail) == (0, "bye\n")
        assert sorted(run_log.read_bytes().splitlines()) == [b"bye", b"hello"]
        escaped = entry["setsid_pid"]
        assert escaped and pid_alive(escaped)
        assert os.getsid(escaped) == escaped != entry["pid"]  # it left the session
    finally:
        kill_quietly(entry["setsid_pid"])


def test_usage_errors_exit_2_and_positional_errors_exit_1(fake_li: Path) -> None:
    assert _run(fake_li, "agent", "--yolo", "--", "m", "p").returncode == 2
    assert _run(fake_li, "o", "flow", "--bogus", "x", "--", "m", "p").returncode == 2
    assert _run(fake_li, "play", "nightly", "--resume").returncode == 2
    assert _run(fake_li, "nonsense").returncode == 2
    assert _run(fake_li).returncode == 2
    assert _run(fake_li, "agent", "--", "m", "p", "extra").returncode == 1
    assert _run(fake_li, "agent", "--").returncode == 1
    assert _run(fake_li, "engine", "run", "--", "coding", "spec").returncode == 1


def test_reads_the_invocation_id_and_the_invocation_flag(fake_li: Path, tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with sqlite3.connect(db) as conn:
        conn.execute(SESSIONS_DDL)
    env = {"LIONAGI_STUDIO_DB": str(db), "LIONAGI_INVOCATION_ID": "from-env"}
    assert _run(fake_li, "agent", "--", "m", "usage=completed", env=env).returncode == 0
    assert (
        _run(
            fake_li, "agent", "--invocation", "from-flag", "--", "m", "usage=failed", env=env
        ).returncode
        == 0
    )
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT invocation_id, status FROM sessions ORDER BY created_at"
        ).fetchall()
    assert rows == [("from-env", "completed"), ("from-flag", "failed")]


async def test_usage_token_inserts_a_session_row(prefix: list[str], tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with sqlite3.connect(db) as conn:
        conn.execute(SESSIONS_DDL)
    argv, _ = build_argv(
        {
            "action_kind": "agent",
            "action_model": "m",
            "action_prompt": "usage=completed:100:50:0.01 usage=failed:1::none exit=1",
        },
        {},
        executable_prefix=prefix,
    )
    code, _ = await spawn_and_wait(
        argv, "abcdefabcdef", env={**os.environ, "LIONAGI_STUDIO_DB": str(db)}
    )
    assert code == 1
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("SELECT * FROM sessions ORDER BY rowid")]
    conn.close()
    assert [
        (
            r["invocation_id"],
            r["status"],
            r["input_tokens"],
            r["output_tokens"],
            r["total_cost_usd"],
        )
        for r in rows
    ] == [
        ("abcdefabcdef", "completed", 100, 50, 0.01),
        ("abcdefabcdef", "failed", 1, None, None),
    ]
    for row in rows:
        assert len(row["id"]) == 12
        assert row["started_at"] <= row["ended_at"] <= row["created_at"]


def test_usage_without_sessions_table_is_skipped_silently(fake_li: Path, tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    sqlite3.connect(db).close()
    result = _run(
        fake_li, "agent", "--", "m", "usage=completed:1:1:1", env={"LIONAGI_STUDIO_DB": str(db)}
    )
    assert (result.returncode, result.stderr) == (0, "")
    # and without LIONAGI_STUDIO_DB nothing is attempted
    env = {k: v for k, v in os.environ.items() if k != "LIONAGI_STUDIO_DB"}
    result = subprocess.run(
        [str(fake_li), "agent", "--", "m", "usage=completed"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, "")


def test_flow_file_text_counts_as_the_prompt(fake_li: Path, tmp_path: Path) -> None:
    spec = tmp_path / "flow.yaml"
    spec.write_text("steps: []  # stderr=from-yaml exit=3\n")
    result = _run(fake_li, "o", "flow", "-f", str(spec), "--")
    assert (result.returncode, result.stderr) == (3, "from-yaml\n")


def test_write_fake_li_creates_the_directory(tmp_path: Path) -> None:
    from studio_launcher.testing import write_fake_li

    path = write_fake_li(tmp_path / "a" / "b")
    assert path == tmp_path / "a" / "b" / "li"
    assert _run(path, "play", "x").returncode == 0
