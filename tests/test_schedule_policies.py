"""Schedule policies through a real ``studio serve``: overlap buffering and cancel-other with
children that run long, a kill -9 between a failure and its retry, pause on failure, and a
backfill over a window with a DST change; an operator's cancel of a planned retry (API) and of
a buffered occurrence (``studio run cancel``), which then never start."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from conftest import assert_consistent, wait_for, write_script

from studio_api.testing import ServeProcess
from studio_scheduler_core.testing import FLAKY
from studio_state.testing import pid_alive

# Blocks until the flag file exists (writing its pid to <flag>.pids first), then exits 0.
BLOCKER = textwrap.dedent(
    """
    import os, sys, time
    flag = sys.argv[1]
    with open(flag + ".pids", "a") as out:
        out.write(f"{os.getpid()}\\n")
    while not os.path.exists(flag):
        time.sleep(0.02)
    """
)


def _create(server: ServeProcess, **fields: Any) -> dict[str, Any]:
    body = {"trigger_type": "interval", "interval_sec": 1, "action_kind": "command", **fields}
    body.setdefault("action_command", "python3")
    body.setdefault("action_cwd", str(server.base))
    answer = server.request("POST", "/api/schedules", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def _runs(server: ServeProcess, sid: str) -> list[dict[str, Any]]:
    return server.rows(
        "SELECT * FROM schedule_runs WHERE schedule_id = ? AND chain_depth = 0 "
        "ORDER BY created_at, rowid",
        (sid,),
    )


def _with(server: ServeProcess, sid: str, status: str, reason: str | None = None) -> list[Any]:
    return [
        r
        for r in _runs(server, sid)
        if r["status"] == status and (reason is None or r["status_reason_code"] == reason)
    ]


def _fired_reasons(server: ServeProcess, run_id: str) -> list[str]:
    rows = server.rows(
        "SELECT reason_code FROM status_transitions WHERE entity_id = ? ORDER BY created_at, rowid",
        (run_id,),
    )
    return [r["reason_code"] for r in rows]


def _disable(server: ServeProcess, sid: str) -> None:
    assert server.request("POST", f"/api/schedules/{sid}/disable").status_code == 200


def _served(studio_process: Any) -> ServeProcess:
    server: ServeProcess = studio_process()
    server.start()
    return server


def _blocked(server: ServeProcess, tmp_path: Path, **fields: Any) -> tuple[dict[str, Any], Path]:
    """A schedule whose children block until the returned flag file exists."""
    blocker = write_script(tmp_path, "blocker.py", BLOCKER)
    flag = tmp_path / "flag"
    return _create(server, action_command_args=[str(blocker), str(flag)], **fields), flag


def _failing(
    server: ServeProcess, tmp_path: Path, succeeds_on: int, **fields: Any
) -> tuple[str, Path]:
    """A daily schedule, triggered now, whose child fails until its ``succeeds_on``-th run."""
    flaky = write_script(tmp_path, "flaky.py", FLAKY)
    counter = tmp_path / "count"
    sid = _create(
        server,
        interval_sec=86400,
        action_command_args=[str(flaky), str(counter), str(succeeds_on)],
        **fields,
    )["id"]
    assert server.request("POST", f"/api/schedules/{sid}/trigger").status_code == 202
    return sid, counter


def _stop_consistent(server: ServeProcess) -> None:
    server.stop()
    assert_consistent(server.db)


def test_buffer_one_starts_the_kept_occurrence_after_the_long_run(
    studio_process: Any, tmp_path: Path
) -> None:
    server = _served(studio_process)
    schedule, flag = _blocked(server, tmp_path, name="b1", overlap_policy="buffer_one")
    sid = schedule["id"]
    wait_for(lambda: _with(server, sid, "skipped", "schedule.skipped.buffer_full"), what="full")
    assert len(_with(server, sid, "waiting_dependency", "schedule.buffered.overlap")) == 1
    assert len(_with(server, sid, "running")) == 1
    flag.write_text("go")
    buffered = wait_for(
        lambda: [
            r
            for r in _with(server, sid, "completed")
            if "schedule.fired.buffered" in _fired_reasons(server, r["id"])
        ],
        what="the buffered occurrence ran",
    )
    assert json.loads(buffered[0]["trigger_context"])["due_at"] > schedule["next_fire_at"]
    _disable(server, sid)
    _stop_consistent(server)


def test_buffer_all_keeps_every_occurrence_and_disable_drops_them(
    studio_process: Any, tmp_path: Path
) -> None:
    server = _served(studio_process)
    schedule, flag = _blocked(server, tmp_path, name="ball", overlap_policy="buffer_all")
    sid = schedule["id"]
    wait_for(lambda: len(_with(server, sid, "waiting_dependency")) >= 3, what="three buffered")
    assert _with(server, sid, "skipped") == []
    _disable(server, sid)
    dropped = _with(server, sid, "skipped", "schedule.skipped.disabled")
    assert len(dropped) >= 3 and _with(server, sid, "waiting_dependency") == []
    flag.write_text("go")
    wait_for(lambda: _with(server, sid, "completed"), what="the long run ended")
    assert _with(server, sid, "waiting_dependency") == []
    assert len(_with(server, sid, "completed")) == 1  # nothing buffered ran after the disable
    _stop_consistent(server)


def test_cancel_other_stops_the_long_run_for_the_new_occurrence(
    studio_process: Any, tmp_path: Path
) -> None:
    server = _served(studio_process)
    schedule, flag = _blocked(
        server, tmp_path, name="co", interval_sec=2, overlap_policy="cancel_other"
    )
    sid = schedule["id"]
    cancelled = wait_for(
        lambda: _with(server, sid, "cancelled", "run.cancelled.overlap"), what="a cancel"
    )
    first_pid = int((tmp_path / "flag.pids").read_text().split()[0])
    wait_for(lambda: not pid_alive(first_pid), what="the cancelled child is gone")
    wait_for(lambda: _with(server, sid, "running"), what="the new occurrence runs")
    assert cancelled[0]["ended_at"] is not None
    _disable(server, sid)
    flag.write_text("go")
    wait_for(lambda: not _with(server, sid, "running"), what="the last run ended")
    _stop_consistent(server)


def test_kill_9_between_a_failure_and_its_retry_keeps_the_plan_and_runs_it_once(
    studio_process: Any, tmp_path: Path
) -> None:
    server = _served(studio_process)
    sid, counter = _failing(
        server, tmp_path, 2, name="retry", retry={"max_attempts": 3, "backoff_sec": 6}
    )
    planned = wait_for(lambda: _with(server, sid, "retry_wait"), what="a retry planned")[0]
    server.kill9()
    assert _with(server, sid, "retry_wait")[0]["id"] == planned["id"]  # the plan survived
    server.restart()
    done = wait_for(lambda: _with(server, sid, "completed"), timeout=60, what="the retry ran")
    assert (done[0]["id"], done[0]["attempt"]) == (planned["id"], 2)
    assert counter.read_text() == "2"
    server.stop()
    runs = _runs(server, sid)
    assert [(r["status"], r["attempt"]) for r in runs] == [("failed", None), ("completed", 2)]
    assert_consistent(server.db)


def test_the_last_failed_attempt_runs_on_fail_and_pauses_the_schedule(
    studio_process: Any, tmp_path: Path
) -> None:
    server = _served(studio_process)
    ok = write_script(tmp_path, "ok.py", "pass\n")
    sid, _ = _failing(
        server,
        tmp_path,
        99,
        name="pause",
        retry={"max_attempts": 2, "backoff_sec": 1},
        on_fail={"command_args": [str(ok)]},
        pause_on_failure=True,
    )
    wait_for(
        lambda: not server.request("GET", f"/api/schedules/{sid}").json()["enabled"],
        what="paused",
    )
    shown = server.request("GET", f"/api/schedules/{sid}").json()
    assert shown["disabled_reason"] == "schedule.disabled.failure"
    runs = _runs(server, sid)
    assert [(r["status"], r["attempt"]) for r in runs] == [("failed", None), ("failed", 2)]
    wait_for(
        lambda: server.rows("SELECT * FROM schedule_runs WHERE chain_depth = 1"),
        what="on_fail",
    )
    follow_ups = server.rows("SELECT chain_parent_id FROM schedule_runs WHERE chain_depth = 1")
    assert [f["chain_parent_id"] for f in follow_ups] == [runs[1]["id"]]
    _stop_consistent(server)


def test_backfill_over_a_dst_change_runs_each_existing_hour_once(
    studio_process: Any, tmp_path: Path
) -> None:
    server = _served(studio_process)
    ok = write_script(tmp_path, "ok.py", "pass\n")
    schedule = _create(
        server,
        name="hourly",
        trigger_type="cron",
        interval_sec=None,
        cron_expr="0 * * * *",
        timezone="Europe/Berlin",
        action_command_args=[str(ok)],
    )
    sid = schedule["id"]
    answer = server.request(
        "POST",
        f"/api/schedules/{sid}/backfill",
        json={"start": "2024-03-31T00:00:00", "end": "2024-04-01T00:00:00"},
    )
    assert answer.status_code == 202 and answer.json() == {"runs": 23}
    wait_for(lambda: len(_with(server, sid, "completed")) == 23, timeout=90, what="23 runs")
    berlin = ZoneInfo("Europe/Berlin")
    contexts = [json.loads(r["trigger_context"]) for r in _with(server, sid, "completed")]
    assert all(c["backfill"] is True for c in contexts)
    hours = sorted(datetime.fromtimestamp(c["due_at"], berlin).hour for c in contexts)
    assert hours == [0, 1, *range(3, 24)]  # 02:00 does not exist that night
    for body, field in (
        ({"start": "2024-04-01", "end": "2024-03-31"}, "start"),
        ({"start": "2024-04-01", "end": "2999-01-01"}, "end"),
        ({"start": "2020-01-01", "end": "2024-03-31"}, "end"),
    ):
        refused = server.request("POST", f"/api/schedules/{sid}/backfill", json=body)
        assert refused.status_code == 422 and refused.json()["field"] == field, refused.text
    _disable(server, sid)
    refused = server.request(
        "POST", f"/api/schedules/{sid}/backfill", json={"start": 1711839600, "end": 1711843200}
    )
    assert refused.status_code == 409
    assert refused.json()["reason_code"] == "schedule.backfill.disabled"
    _stop_consistent(server)


def test_bad_policy_fields_are_422_naming_the_field_and_nothing_is_written(
    studio_process: Any, tmp_path: Path
) -> None:
    server = _served(studio_process)
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"overlap_policy": "buffer"}, "overlap_policy", "buffer_one"),
        ({"interval_sec": 60, "jitter_sec": 60}, "jitter_sec", "never fire on time"),
        ({"retry": {"max_attempts": 0}}, "retry.max_attempts", "between 1 and 10"),
        ({"retry": {"max_attempts": 11}}, "retry.max_attempts", "between 1 and 10"),
    ]
    for fields, field, needle in cases:
        body = {
            "name": "bad",
            "trigger_type": "interval",
            "interval_sec": 60,
            "action_kind": "command",
            "action_command": "python3",
            **fields,
        }
        answer = server.request("POST", "/api/schedules", json=body)
        assert answer.status_code == 422, answer.text
        assert answer.json()["field"] == field and needle in answer.json()["detail"], answer.text
    assert server.rows("SELECT id FROM schedules") == []
    server.stop()


CANCELLED = "run.cancelled.operator"


def _studio(server: ServeProcess, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "studio_cli", *args, "--db", str(server.db)],
        capture_output=True,
        text=True,
        env=server.env,
        cwd=server.base,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_a_cancelled_retry_never_runs(studio_process: Any, tmp_path: Path) -> None:
    server = _served(studio_process)
    sid, counter = _failing(
        server, tmp_path, 2, name="retry-cancel", retry={"max_attempts": 3, "backoff_sec": 2}
    )
    planned = wait_for(lambda: _with(server, sid, "retry_wait"), what="a retry planned")[0]
    answer = server.request("POST", f"/api/schedules/runs/{planned['id']}/cancel")
    assert answer.status_code == 202, answer.text
    assert (answer.json()["status"], answer.json()["status_reason_code"]) == (
        "cancelled",
        CANCELLED,
    )
    time.sleep(4)  # twice the backoff: a retry still planned would have run by now
    assert counter.read_text() == "1"
    runs = [(r["status"], r["status_reason_code"]) for r in _with(server, sid, "cancelled")]
    assert runs == [("cancelled", CANCELLED)]
    assert not _with(server, sid, "running") and not _with(server, sid, "completed")
    again = server.request("POST", f"/api/schedules/runs/{planned['id']}/cancel")
    assert again.status_code == 409 and again.json()["reason_code"], again.text
    _stop_consistent(server)


def test_a_cancelled_buffered_occurrence_never_runs(studio_process: Any, tmp_path: Path) -> None:
    server = _served(studio_process)
    schedule, flag = _blocked(
        server, tmp_path, name="buffer-cancel", interval_sec=2, overlap_policy="buffer_one"
    )
    sid = schedule["id"]
    kept = wait_for(
        lambda: _with(server, sid, "waiting_dependency", "schedule.buffered.overlap"),
        what="an occurrence buffered",
    )[0]
    proc = _studio(server, "run", "cancel", kept["id"])
    assert proc.returncode == 0, proc.stderr
    assert "waiting_dependency" in proc.stdout
    row = server.rows("SELECT * FROM schedule_runs WHERE id = ?", (kept["id"],))[0]
    assert (row["status"], row["status_reason_code"]) == ("cancelled", CANCELLED)
    # Disabling skips what is buffered now (later occurrences); the cancelled row stays so.
    assert server.request("POST", f"/api/schedules/{sid}/disable").status_code == 200
    flag.write_text("go")
    wait_for(lambda: not _with(server, sid, "running"), what="the long run ended")
    time.sleep(2)  # a buffered occurrence still kept would start on the next ticks
    assert server.rows("SELECT status FROM schedule_runs WHERE id = ?", (kept["id"],)) == [
        {"status": "cancelled"}
    ]
    assert not _with(server, sid, "waiting_dependency")
    _stop_consistent(server)
