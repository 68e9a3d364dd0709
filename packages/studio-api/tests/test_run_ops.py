"""Run logs (plain and SSE), cancel of every run kind, and delete with running runs.

Each test serves the real app with uvicorn on loopback; children are real processes (the fake
``li`` of ``studio_launcher.testing``, or ``sh``/``python3`` commands).
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from studio_state.testing import pid_alive


@pytest.fixture
def li_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "fake-li.jsonl"
    monkeypatch.setenv("FAKE_LI_LOG", str(path))
    return path


def _agent(name: str, prompt: str, workdir: Path, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "trigger_type": "interval",
        "interval_sec": 3600,
        "action_kind": "agent",
        "action_prompt": prompt,
        "action_cwd": str(workdir),
        **fields,
    }


def _run(studio: Any, run_id: str) -> dict[str, Any]:
    answer = studio.client.get(f"/api/schedules/runs/{run_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _sse(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """``(event, data)`` pairs of a Server-Sent Events stream."""
    event, data = "message", ""
    for line in lines:
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "":
            yield event, data
            event, data = "message", ""


_REQUEST_TASKS = ("RequestResponseCycle.run_asgi", "TaskHandle._run_coro")
"""Coroutines of the server's tasks that serve one request (a streaming response's)."""


def test_a_run_log_streams_while_the_child_runs_then_ends_with_its_status(
    serve: Callable[..., Any], fake_li: Path, workdir: Path, wait: Any
) -> None:
    studio = serve(li_executable=str(fake_li))
    created = studio.client.post(
        "/api/schedules",
        json=_agent("talker", "stdout=first-line sleep=1.5 stderr=went-wrong exit=3", workdir),
    ).json()
    run_id = studio.client.post(f"/api/schedules/{created['id']}/trigger").json()["run_id"]
    seen: list[tuple[str, str, str]] = []
    with httpx.stream(
        "GET", f"{studio.base_url}/api/schedules/runs/{run_id}/log/stream", timeout=30
    ) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        for event, data in _sse(stream.iter_lines()):
            seen.append((event, data, _run(studio, run_id)["status"]))
            if event == "end":
                break
    assert ("message", "first-line", "running") in seen  # read while the child still ran
    assert ("message", "went-wrong") in [(e, d) for e, d, _ in seen]
    event, data, _ = seen[-1]
    assert event == "end"
    assert json.loads(data) == {"status": "failed", "reason_code": "run.failed.exit_nonzero"}

    log = studio.client.get(f"/api/schedules/runs/{run_id}/log")
    assert log.status_code == 200 and log.headers["content-type"].startswith("text/plain")
    assert log.text == "first-line\nwent-wrong\n"
    assert studio.client.get(f"/api/schedules/runs/{run_id}/log?tail=11").text == "went-wrong\n"
    assert "went-wrong" in _run(studio, run_id)["error_detail"]
    path = Path(studio.settings.db).parent / "runs" / f"{run_id}.log"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_log_routes_refuse_bad_input(
    serve: Callable[..., Any], fake_li: Path, workdir: Path, wait: Any, tmp_path: Path
) -> None:
    logs = tmp_path / "elsewhere"
    studio = serve(
        li_executable=str(fake_li), max_adhoc_concurrent=1, run_log_dir=logs, run_log_bytes=4096
    )
    for route in ("log", "log/stream"):
        missing = studio.client.get(f"/api/schedules/runs/nosuchrun/{route}")
        assert missing.status_code == 404 and missing.json()["field"] == "run_id"
    assert studio.client.post("/api/schedules/runs/nosuchrun/cancel").status_code == 404
    body = {"action_kind": "agent", "action_prompt": "sleep=30", "action_cwd": str(workdir)}
    first = studio.client.post("/api/runs", json=body).json()["run_id"]
    queued = studio.client.post("/api/runs", json=body).json()["run_id"]
    wait(lambda: _run(studio, first)["status"] == "running")
    assert _run(studio, queued)["status"] == "queued"
    empty = studio.client.get(f"/api/schedules/runs/{queued}/log")
    assert empty.status_code == 200 and empty.text == ""
    for tail in ("-1", "0", "4097", "99999999999999999999999"):
        refused = studio.client.get(f"/api/schedules/runs/{first}/log", params={"tail": tail})
        assert refused.status_code == 422, (tail, refused.text)
        assert "tail" in refused.text
    assert studio.client.get(f"/api/schedules/runs/{first}/log?tail=4096").status_code == 200
    for run_id in (queued, first):
        assert studio.client.post(f"/api/schedules/runs/{run_id}/cancel").status_code == 202
    assert logs.is_dir()  # made at spawn; the file itself comes with the first output
    assert not (Path(studio.settings.db).parent / "runs").exists()


def test_a_disconnecting_stream_client_leaks_no_task(
    serve: Callable[..., Any], fake_li: Path, workdir: Path, wait: Any
) -> None:
    studio = serve(li_executable=str(fake_li))
    created = studio.client.post(
        "/api/schedules", json=_agent("long", "stdout=hello sleep=30", workdir)
    ).json()
    run_id = studio.client.post(f"/api/schedules/{created['id']}/trigger").json()["run_id"]
    wait(lambda: _run(studio, run_id)["status"] == "running")

    def request_tasks() -> list[str]:
        return [n for n in studio.server.task_names() if n in _REQUEST_TASKS]

    assert request_tasks() == []
    for _ in range(3):
        with httpx.stream(
            "GET", f"{studio.base_url}/api/schedules/runs/{run_id}/log/stream", timeout=30
        ) as stream:
            for _event, data in _sse(stream.iter_lines()):
                if data == "hello":
                    assert request_tasks()  # the stream is being served
                    break  # leave mid-stream
    wait(lambda: request_tasks() == [], timeout=10)
    assert studio.client.post(f"/api/schedules/runs/{run_id}/cancel").status_code == 202


def test_cancel_stops_a_scheduled_run_and_its_escaped_descendants(
    serve: Callable[..., Any], fake_li: Path, li_log: Path, workdir: Path, wait: Any
) -> None:
    studio = serve(li_executable=str(fake_li))
    created = studio.client.post(
        "/api/schedules",
        json=_agent("stuck", "stdout=up setsid=120 sleep=120", workdir, on_fail={"prompt": "x"}),
    ).json()
    run_id = studio.client.post(f"/api/schedules/{created['id']}/trigger").json()["run_id"]
    wait(lambda: li_log.exists() and _run(studio, run_id)["child_pid"])
    entry = json.loads(li_log.read_text().splitlines()[0])
    started = time.monotonic()
    answer = studio.client.post(f"/api/schedules/runs/{run_id}/cancel")
    assert answer.status_code == 202, answer.text
    assert time.monotonic() - started < 10
    run = _run(studio, run_id)
    assert run["status"] == "cancelled"
    assert run["status_reason_code"] == "run.cancelled.operator"
    assert run["chain_children"] == []  # on_fail never runs after a cancel
    wait(lambda: not pid_alive(entry["pid"]) and not pid_alive(entry["setsid_pid"]))
    again = studio.client.post(f"/api/schedules/runs/{run_id}/cancel")
    assert again.status_code == 409
    assert again.json()["reason_code"] == "run.cancel.terminal"
    assert "cancelled" in again.json()["detail"]
    invocation = studio.db_rows(
        "SELECT status FROM invocations WHERE id = ?", run["invocation_id"]
    )[0]
    assert invocation["status"] == "cancelled"


def test_cancel_stops_a_follow_up_run(
    serve: Callable[..., Any], fake_li: Path, workdir: Path, wait: Any
) -> None:
    studio = serve(li_executable=str(fake_li))
    created = studio.client.post(
        "/api/schedules",
        json=_agent("chain", "exit=0", workdir, on_success={"prompt": "stdout=next sleep=120"}),
    ).json()
    parent = studio.client.post(f"/api/schedules/{created['id']}/trigger").json()["run_id"]

    def child_running() -> str | None:
        children = _run(studio, parent)["chain_children"]
        ready = children and children[0]["status"] == "running" and children[0]["child_pid"]
        return str(children[0]["id"]) if ready else None

    child = wait(child_running)
    assert studio.client.post(f"/api/schedules/runs/{child}/cancel").status_code == 202
    run = _run(studio, child)
    assert (run["status"], run["status_reason_code"]) == ("cancelled", "run.cancelled.operator")
    assert not pid_alive(int(run["child_pid"])) or wait(
        lambda: not pid_alive(int(run["child_pid"]))
    )


def test_delete_with_a_running_run_needs_force(
    serve: Callable[..., Any], fake_li: Path, workdir: Path, wait: Any
) -> None:
    studio = serve(li_executable=str(fake_li))
    created = studio.client.post("/api/schedules", json=_agent("busy", "sleep=120", workdir)).json()
    run_id = studio.client.post(f"/api/schedules/{created['id']}/trigger").json()["run_id"]
    wait(lambda: _run(studio, run_id)["child_pid"])
    pid = int(_run(studio, run_id)["child_pid"])
    refused = studio.client.delete(f"/api/schedules/{created['id']}")
    assert refused.status_code == 409
    assert refused.json()["reason_code"] == "schedule.delete.running"
    assert studio.client.get(f"/api/schedules/{created['id']}").status_code == 200
    assert _run(studio, run_id)["status"] == "running"
    forced = studio.client.delete(f"/api/schedules/{created['id']}", params={"force": "true"})
    assert forced.status_code == 200, forced.text
    assert studio.client.get(f"/api/schedules/{created['id']}").status_code == 404
    assert studio.client.get(f"/api/schedules/runs/{run_id}").status_code == 404
    wait(lambda: not pid_alive(pid))
    transitions = studio.db_rows(
        "SELECT reason_code FROM status_transitions WHERE entity_id = ? AND status = ?",
        run_id,
        "cancelled",
    )
    assert [t["reason_code"] for t in transitions] == ["run.cancelled.operator"]


def test_a_flood_of_output_stays_within_the_bound_and_ticks_stay_on_time(
    serve: Callable[..., Any], script: Callable[..., Path], workdir: Path, wait: Any
) -> None:
    studio = serve(run_log_bytes=256 * 1024)
    flood = workdir / "flood.py"
    flood.write_text(
        "import sys\nchunk = b'x' * (1 << 20)\n"
        "for _ in range(100):\n    sys.stdout.buffer.write(chunk)\n"
        "sys.stdout.buffer.write(b'THE-END')\n",
        encoding="utf-8",
    )
    ticker = script("tick.sh", "date +%s.%N >> ticks.txt\n")
    studio.client.post(
        "/api/schedules",
        json={
            "name": "ticker",
            "trigger_type": "interval",
            "interval_sec": 1,
            "action_kind": "command",
            "action_command": "sh",
            "action_command_args": [str(ticker)],
            "action_cwd": str(workdir),
            "overlap_policy": "allow",
        },
    )
    created = studio.client.post(
        "/api/schedules",
        json={
            "name": "flood",
            "trigger_type": "interval",
            "interval_sec": 3600,
            "action_kind": "command",
            "action_command": "python3",
            "action_command_args": [str(flood)],
            "action_cwd": str(workdir),
        },
    ).json()
    ticks_file = workdir / "ticks.txt"
    wait(lambda: ticks_file.exists())
    run_id = studio.client.post(f"/api/schedules/{created['id']}/trigger").json()["run_id"]
    wait(lambda: _run(studio, run_id)["status"] == "completed", timeout=120)
    during = len(ticks_file.read_text().split())
    wait(lambda: len(ticks_file.read_text().split()) >= during + 2)
    path = Path(studio.settings.db).parent / "runs" / f"{run_id}.log"
    assert path.stat().st_size <= 256 * 1024
    text = studio.client.get(f"/api/schedules/runs/{run_id}/log?tail=7").text
    assert text == "THE-END"  # never a newline, the newest output kept
    assert "bytes dropped" in studio.client.get(f"/api/schedules/runs/{run_id}/log").text
    ticks = [float(t) for t in ticks_file.read_text().split()]
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert max(gaps) < 5, gaps  # generous liveness bound: the flood does not stall the tick
    assert os.path.getsize(path) <= 256 * 1024
