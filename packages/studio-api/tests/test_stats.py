"""Health on the schedule views, ``/api/schedules/{id}/status``, ``/api/stats/*`` and the
``studio_schedules{health}`` gauge, through the real app on uvicorn."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

HEALTH_KEYS = {
    "health",
    "consecutive_failures",
    "last_status",
    "last_run_at",
    "next_fire_at",
    "success_rate_7d",
    "duration_p50_7d",
    "duration_p95_7d",
    "remaining_runs",
    "spend_usd",
    "spend_tokens",
    "spend_partial",
}


def _create(studio: Any, body: dict[str, Any]) -> dict[str, Any]:
    answer = studio.client.post("/api/schedules", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def _ran(studio: Any, wait: Any, schedule_id: str) -> dict[str, Any]:
    run_id = studio.client.post(f"/api/schedules/{schedule_id}/trigger").json()["run_id"]

    def ended() -> dict[str, Any] | None:
        run = studio.client.get(f"/api/schedules/runs/{run_id}").json()
        return run if run["status"] not in ("queued", "running") else None

    return dict(wait(ended))


def test_views_status_and_stats(
    studio: Any, command_schedule: Callable[..., Any], script: Callable[..., Path], wait: Any
) -> None:
    ok = _create(studio, command_schedule("ok", script("ok.sh", "exit 0\n"), max_runs=5))
    bad = _create(
        studio, command_schedule("bad", script("bad.sh", "echo first >&2\necho boom >&2\nexit 3\n"))
    )
    quiet = _create(studio, command_schedule("quiet"))
    assert ok["health"] == "never_fired" and set(ok) >= HEALTH_KEYS
    assert _ran(studio, wait, ok["id"])["status"] == "completed"
    failed = _ran(studio, wait, bad["id"])
    assert (failed["status"], failed["error_class"]) == ("failed", "nonzero_exit")

    listed = {s["name"]: s for s in studio.client.get("/api/schedules").json()["schedules"]}
    assert listed["ok"]["health"] == "healthy" and listed["ok"]["remaining_runs"] == 4
    assert listed["ok"]["last_status"] == "completed"
    assert listed["bad"]["health"] == "failing" and listed["bad"]["consecutive_failures"] == 1
    assert listed["quiet"]["health"] == "never_fired"
    one = studio.client.get(f"/api/schedules/{ok['id']}").json()
    assert one["health"] == "healthy" and one["success_rate_7d"] == 1.0

    status = studio.client.get(f"/api/schedules/{bad['id']}/status")
    assert status.status_code == 200, status.text
    body = status.json()
    assert body["health"] == "failing" and body["name"] == "bad"
    last = body["last_run"]
    assert last["id"] == failed["id"] and last["status"] == "failed"
    assert last["reason_code"] == "run.failed.exit_nonzero"
    assert last["error_class"] == "nonzero_exit" and last["exit_code"] == 3
    assert last["stderr_tail"][-1] == "boom"
    assert isinstance(last["duration_seconds"], int)
    assert body["running_run_ids"] == []
    assert studio.client.get(f"/api/schedules/{quiet['id']}/status").json()["last_run"] is None
    missing = studio.client.get("/api/schedules/000000000000/status")
    assert missing.status_code == 404

    day = studio.client.get("/api/stats/activity", params={"window": "24h"}).json()
    assert day["window"] == "24h" and len(day["buckets"]) == 24
    assert sum(b["fires"] for b in day["buckets"]) == 2
    assert sum(b["completed"] for b in day["buckets"]) == 1
    assert sum(b["failed"] for b in day["buckets"]) == 1
    assert day["completion_rate"] == 0.5
    week = studio.client.get("/api/stats/activity", params={"window": "7d"}).json()
    assert len(week["buckets"]) == 168
    spend = studio.client.get("/api/stats/spend", params={"by": "schedule"}).json()
    assert {row["label"] for row in spend["rows"]} == {"ok", "bad"}
    assert spend["spend_partial"] is True
    actions = studio.client.get("/api/stats/spend", params={"by": "action"}).json()
    assert [row["key"] for row in actions["rows"]] == ["command:sh"]

    metrics = studio.client.get("/metrics").text
    [family] = [f for f in text_string_to_metric_families(metrics) if f.name == "studio_schedules"]
    counts = {s.labels["health"]: s.value for s in family.samples}
    assert counts == {
        "disabled": 0,
        "never_fired": 1,
        "healthy": 1,
        "failing": 1,
        "overdue": 0,
    }


def test_bad_window_and_by_are_422_naming_them(studio: Any) -> None:
    window = studio.client.get("/api/stats/activity", params={"window": "1y"})
    assert window.status_code == 422 and window.json()["field"] == "window"
    by = studio.client.get("/api/stats/spend", params={"by": "node"})
    assert by.status_code == 422 and by.json()["field"] == "by"
