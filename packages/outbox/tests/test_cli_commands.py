"""``python -m studio_outbox enqueue|list|show|ack|retry|purge`` (flags of ``studio dispatch``)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import studio_outbox
from studio_outbox import _cli as cli

PREFIX = "python -m studio_outbox: error: "


def _real(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real command in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "studio_outbox", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        check=False,
    )


def _one_line(err: str, fragment: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(PREFIX) and fragment in lines[0], err
    assert "Traceback" not in err and "unexpected" not in err


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = tmp_path / "cli.db"
    sqlite3.connect(path).close()
    return str(path)


def _token(db: str, dispatch_id: str) -> str:
    conn = sqlite3.connect(db)
    try:
        return str(
            conn.execute(
                "SELECT ack_token FROM dispatch_outbox WHERE id = ?", (dispatch_id,)
            ).fetchone()[0]
        )
    finally:
        conn.close()


def test_the_whole_workflow_through_real_processes(db: str) -> None:
    body = json.dumps({"run_id": "r1"})
    done = _real(
        "enqueue", "--db", db, "--kind", "run.failed", "--to", "ops", "--body", body,
        "--dedup-key", "run:r1", "--ack", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    created = json.loads(done.stdout)
    assert created["created"] is True
    dispatch_id = created["id"]
    again = _real(
        "enqueue", "--db", db, "--kind", "run.failed", "--to", "ops", "--dedup-key", "run:r1",
        "--json",
    )  # fmt: skip
    assert json.loads(again.stdout) == {"id": dispatch_id, "created": False}

    listed = json.loads(_real("list", "--db", db, "--json").stdout)
    assert listed["total"] == 1 and listed["limit"] == 50 and listed["offset"] == 0
    assert [r["id"] for r in listed["dispatches"]] == [dispatch_id]
    assert "payload" not in listed["dispatches"][0]
    text = _real("list", "--db", db)
    assert text.returncode == 0 and dispatch_id in text.stdout and "run.failed" in text.stdout

    shown = _real("show", dispatch_id, "--db", db, "--json")
    row = json.loads(shown.stdout)
    assert row["payload"]["body"] == {"run_id": "r1"} and row["ack_required"] is True
    token = _token(db, dispatch_id)
    assert token not in shown.stdout and token not in _real("show", dispatch_id, "--db", db).stdout

    acked = _real("ack", dispatch_id, token, "--db", db, "--json")
    assert json.loads(acked.stdout) == {
        "dispatch_id": dispatch_id,
        "acked": True,
        "status": "acked",
    }
    refused = _real("retry", dispatch_id, "--db", db)
    assert refused.returncode == 1
    _one_line(refused.stderr, "retry only applies to dead_letter or expired rows")

    no_yes = _real("purge", dispatch_id, "--db", db, stdin="")
    assert no_yes.returncode == 1
    _one_line(no_yes.stderr, "pass --yes")
    purged = _real("purge", dispatch_id, "--db", db, "--yes", "--json")
    assert json.loads(purged.stdout) == {
        "dispatch_id": dispatch_id,
        "purged": True,
        "status": "acked",
    }
    gone = _real("show", dispatch_id, "--db", db)
    assert gone.returncode == 1
    _one_line(gone.stderr, f"dispatch {dispatch_id!r} not found")


def test_retry_requeues_a_dead_letter(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(capsys, "enqueue", "--db", db, "--kind", "k", "--to", "ops", "--json")
    dispatch_id = json.loads(out)["id"]
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "UPDATE dispatch_outbox SET status = 'dead_letter' WHERE id = ?", (dispatch_id,)
        )
    conn.close()
    code, out, err = _main(capsys, "retry", dispatch_id, "--db", db)
    assert code == 0, err
    assert out.strip() == f"Dispatch {dispatch_id} queued for retry (pending)"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("enqueue", "--kind", " ", "--to", "ops"), "--kind: must not be empty"),
        (("enqueue", "--kind", "k", "--to", ""), "--to: must not be empty"),
        (("enqueue", "--kind", "k", "--to", "o", "--body", "{"), "--body: not valid JSON"),
        (("enqueue", "--kind", "k", "--to", "o", "--body", "[1]"), "--body: must be a JSON object"),
        (("show", "nope"), "dispatch 'nope' not found"),
        (("ack", "nope", "t"), "dispatch 'nope' not found"),
        (("purge", "nope", "--yes"), "dispatch 'nope' not found"),
        (("list", "--kind", ""), "kind: must be a non-empty string"),
    ],
)
def test_bad_input_is_one_line_exit_1_and_writes_nothing(
    db: str, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], fragment: str
) -> None:
    code, out, err = _main(capsys, *args, "--db", db)
    assert code == 1, (out, err)
    _one_line(err, fragment)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT count(*) FROM dispatch_outbox").fetchone()[0] == 0
    finally:
        conn.close()


def test_usage_errors_and_missing_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.db"
    code, _, err = _main(capsys, "list", "--db", str(missing))
    assert code == 1
    _one_line(err, "--db: no such file")
    assert not missing.exists()
    for args in (
        ("enqueue", "--db", str(missing), "--kind", "k"),
        ("list", "--db", str(missing), "--status", "bogus"),
        ("list", "--db", str(missing), "--limit", "0"),
        ("enqueue", "--db", str(missing), "--kind", "k", "--to", "o", "--max-attempts", "0"),
        ("ack", "only-id", "--db", str(missing)),
        ("list", "--db", str(missing), "--synchronous", "off"),
    ):
        code, _, err = _main(capsys, *args)
        assert code == 2, args
        assert "usage:" in err and "Traceback" not in err


def test_enqueued_rows_are_the_librarys(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(
        capsys, "enqueue", "--db", db, "--kind", "k", "--to", "ops", "--max-attempts", "3",
        "--expires-at", "4102444800", "--synchronous", "normal",
    )  # fmt: skip
    assert code == 0, err
    dispatch_id = out.split()[-1]
    conn = sqlite3.connect(db)
    try:
        row: Any = studio_outbox.sync.get_dispatch(conn, dispatch_id)
    finally:
        conn.close()
    assert row["max_attempts"] == 3 and row["expires_at"] == 4102444800.0
    assert row["status"] == "pending" and row["ack_required"] is False
