"""/api/runs: ad-hoc runs queued through the API and executed by the engine's host worker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def _body(workdir: Path, script_path: Path, **fields: Any) -> dict[str, Any]:
    return {
        "action_kind": "command",
        "action_command": "sh",
        "action_command_args": [str(script_path)],
        "action_cwd": str(workdir),
        **fields,
    }


def test_an_ad_hoc_run_is_queued_then_executed(
    studio: Any, script: Callable[..., Path], workdir: Path, wait: Any
) -> None:
    ok = script("adhoc.sh", "echo ran > adhoc.txt\n")
    answer = studio.client.post("/api/runs", json=_body(workdir, ok, concurrency_key="k1"))
    assert answer.status_code == 202, answer.text
    assert set(answer.json()) == {"run_id"}
    run = studio.client.get(f"/api/runs/{answer.json()['run_id']}").json()
    assert run["schedule_id"] is None and run["queued_at"] is not None
    assert run["concurrency_key"] == "k1"

    def done() -> dict[str, Any] | None:
        current = studio.client.get(f"/api/runs/{run['id']}").json()
        return current if current["status"] == "completed" else None

    finished = wait(done)
    assert finished["exit_code"] == 0
    assert (workdir / "adhoc.txt").read_text().strip() == "ran"
    page = studio.client.get("/api/runs").json()
    assert page["total"] == 1 and page["runs"][0]["id"] == run["id"]
    assert studio.client.get("/api/runs", params={"status": "completed"}).json()["total"] == 1
    assert studio.client.get("/api/runs", params={"status": "queued"}).json()["total"] == 0
    again = studio.client.post(f"/api/runs/{run['id']}/cancel")
    assert again.status_code == 409 and "completed" in again.json()["detail"]
    deleted = studio.client.delete(f"/api/runs/{run['id']}")
    assert deleted.status_code == 409 and "completed" in deleted.json()["detail"]


def test_cancel_stops_a_running_ad_hoc_run(
    alive: Callable[[int], bool], studio: Any, script: Callable[..., Path], workdir: Path, wait: Any
) -> None:
    slow = script("slow.sh", "sleep 60 &\necho $! > adhoc-sleep.pid\nwait\n")
    run = {"id": studio.client.post("/api/runs", json=_body(workdir, slow)).json()["run_id"]}

    def running() -> dict[str, Any] | None:
        current = studio.client.get(f"/api/runs/{run['id']}").json()
        pid_file = workdir / "adhoc-sleep.pid"
        ready = current["status"] == "running" and pid_file.exists()
        return current if ready and pid_file.read_text().strip() else None

    wait(running)
    sleep_pid = int((workdir / "adhoc-sleep.pid").read_text())
    cancelled = studio.client.post(f"/api/runs/{run['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    wait(lambda: not alive(sleep_pid), timeout=15)


def test_ad_hoc_errors(
    studio: Any,
    script: Callable[..., Path],
    workdir: Path,
    command_schedule: Callable[..., Any],
) -> None:
    ok = script("ok.sh", "exit 0\n")
    for body, field in [
        ({**_body(workdir, ok), "trigger_type": "cron"}, "trigger_type"),
        ({"action_command": "sh"}, "action_kind"),
        (_body(workdir, ok, action_command="rm"), "action_command"),
        (_body(workdir, ok, concurrency_key=" x"), "concurrency_key"),
        (_body(workdir, ok, action_cwd="relative"), "action_cwd"),
    ]:
        answer = studio.client.post("/api/runs", json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["field"] == field
    assert studio.client.get("/api/runs").json()["total"] == 0
    assert studio.client.get("/api/runs/000000000000").status_code == 404
    assert studio.client.post("/api/runs/000000000000/cancel").status_code == 404
    assert studio.client.delete("/api/runs/000000000000").status_code == 404
    bad = studio.client.get("/api/runs", params={"status": "nope"})
    assert bad.status_code == 422 and bad.json()["field"] == "status"
    # a scheduled run is not an ad-hoc run
    created = studio.client.post("/api/schedules", json=command_schedule("s", ok)).json()
    run_id = studio.client.post(f"/api/schedules/{created['id']}/trigger").json()["run_id"]
    assert studio.client.get(f"/api/runs/{run_id}").status_code == 404
    assert studio.client.get(f"/api/schedules/runs/{run_id}").status_code == 200


def test_delete_cancels_queued_and_running_runs(
    alive: Callable[[int], bool], serve: Any, script: Callable[..., Path], workdir: Path, wait: Any
) -> None:
    studio = serve(max_adhoc_concurrent=1)
    slow = script("slow.sh", "sleep 60 &\necho $! > adhoc-sleep.pid\nwait\n")
    first = studio.client.post("/api/runs", json=_body(workdir, slow)).json()["run_id"]
    second = studio.client.post("/api/runs", json=_body(workdir, slow)).json()["run_id"]
    pid_file = workdir / "adhoc-sleep.pid"

    def running() -> bool:
        status = studio.client.get(f"/api/runs/{first}").json()["status"]
        return status == "running" and pid_file.exists() and bool(pid_file.read_text().strip())

    wait(running)
    assert studio.client.get(f"/api/runs/{second}").json()["status"] == "queued"  # pool of 1
    queued = studio.client.delete(f"/api/runs/{second}")
    assert queued.status_code == 200, queued.text
    assert (queued.json()["status"], queued.json()["status_reason_code"]) == (
        "cancelled",
        "run.cancelled.operator",
    )
    sleep_pid = int(pid_file.read_text())
    answer = studio.client.delete(f"/api/runs/{first}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "cancelled" and answer.json()["ended_at"] is not None
    assert not alive(sleep_pid)  # the whole process group is gone when the answer comes
    page = studio.client.get("/api/runs", params={"status": "cancelled"}).json()
    assert page["total"] == 2


def test_an_ad_hoc_run_takes_its_own_timeout_sec(
    studio: Any, script: Callable[..., Path], workdir: Path, wait: Any
) -> None:
    slow = script("slow-timeout.sh", "exec sleep 60\n")
    for bad in (0, 7 * 86400 + 1):
        refused = studio.client.post("/api/runs", json=_body(workdir, slow, timeout_sec=bad))
        assert refused.status_code == 422, refused.text
        assert refused.json()["field"] == "timeout_sec"
    assert studio.client.get("/api/runs").json()["total"] == 0
    answer = studio.client.post("/api/runs", json=_body(workdir, slow, timeout_sec=1))
    assert answer.status_code == 202, answer.text
    run_id = answer.json()["run_id"]

    def ended() -> dict[str, Any] | None:
        current = studio.client.get(f"/api/runs/{run_id}").json()
        return current if current["status"] not in ("queued", "running") else None

    finished = wait(ended, timeout=30)
    assert (finished["status"], finished["status_reason_code"]) == (
        "timed_out",
        "run.timed_out.deadline",
    )
