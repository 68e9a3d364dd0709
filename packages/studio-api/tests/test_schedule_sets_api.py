"""``POST /api/schedule-sets/plan`` and ``/apply`` through the real app on uvicorn: YAML and
JSON bodies, ``?dry_run=1``, 422 with every error, 409 for plan errors with nothing written,
``managed_by``/``owner_key``/``drifted`` on the schedule views and the warning an update of a
set-owned schedule answers with."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio_scheduler_core.testing import SET_HEADER, sample_set, set_document, set_member

SET_YAML = sample_set()

YAML = {"content-type": "application/yaml"}


def _count(studio: Any, sql: str) -> int:
    return int(next(iter(studio.db_rows(sql)[0].values())))


def test_plan_apply_and_apply_again(studio: Any, workdir: Path) -> None:
    plan = studio.client.post("/api/schedule-sets/plan", content=SET_YAML, headers=YAML)
    assert plan.status_code == 200, plan.text
    assert plan.json()["owner"] == "team-a"
    assert [(c["name"], c["action"]) for c in plan.json()["changes"]] == [
        ("team-a/nightly", "create"),
        ("team-a/hourly", "create"),
    ]
    dry = studio.client.post("/api/schedule-sets/apply?dry_run=1", content=SET_YAML, headers=YAML)
    assert dry.status_code == 200 and dry.json()["dry_run"] is True
    assert studio.client.get("/api/schedules").json()["total"] == 0

    applied = studio.client.post("/api/schedule-sets/apply", content=SET_YAML, headers=YAML)
    assert applied.status_code == 200, applied.text
    assert applied.json()["applied"] == {
        "created": 2,
        "updated": 0,
        "disabled": 0,
        "deleted": 0,
        "writes": 2,
        "cancelled": [],
    }
    listed = studio.client.get("/api/schedules").json()["schedules"]
    assert {(s["name"], s["managed_by"], s["owner_key"], s["drifted"]) for s in listed} == {
        ("team-a/nightly", "set", "team-a", False),
        ("team-a/hourly", "set", "team-a", False),
    }
    actors = studio.db_rows("SELECT DISTINCT actor FROM status_transitions")
    assert [r["actor"] for r in actors] == ["set:team-a"]

    transitions = _count(studio, "SELECT count(*) AS n FROM status_transitions")
    as_json = json.dumps(
        {
            "apiVersion": "studio/v1",
            "kind": "ScheduleSet",
            "metadata": {"name": "team-a"},
            "schedules": {
                "nightly": {
                    "trigger": {"cron": {"expression": "0 3 * * *", "timezone": "Europe/Paris"}},
                    "command": {"argv": ["sh", "-c", "true"]},
                    "retry": {"max_attempts": 2, "backoff_sec": "90s"},
                },
                "hourly": {"trigger": {"every": "1h"}, "command": {"argv": ["sh", "-c", "true"]}},
            },
        }
    )
    again = studio.client.post(
        "/api/schedule-sets/apply",
        content=as_json,
        headers={"content-type": "application/json"},
    )
    assert again.status_code == 200, again.text
    assert again.json()["applied"]["writes"] == 0
    assert {c["action"] for c in again.json()["changes"]} == {"unchanged"}
    assert _count(studio, "SELECT count(*) AS n FROM status_transitions") == transitions


def test_an_update_of_a_set_owned_schedule_succeeds_and_warns(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    assert studio.client.post("/api/schedule-sets/apply", content=SET_YAML, headers=YAML).is_success
    created = studio.client.post("/api/schedules", json=command_schedule("by-hand"))
    assert created.status_code == 201
    assert (created.json()["managed_by"], created.json()["owner_key"]) == ("api", None)
    assert created.json()["warnings"] == []

    hourly = next(
        s for s in studio.client.get("/api/schedules").json()["schedules"] if "hourly" in s["name"]
    )
    patched = studio.client.patch(f"/api/schedules/{hourly['id']}", json={"interval_sec": 600})
    assert patched.status_code == 200, patched.text
    body = patched.json()
    assert body["interval_sec"] == 600 and body["drifted"] is True
    assert len(body["warnings"]) == 1 and "next apply" in body["warnings"][0]
    assert studio.client.get(f"/api/schedules/{hourly['id']}").json()["drifted"] is True

    plan = studio.client.post("/api/schedule-sets/plan", content=SET_YAML, headers=YAML).json()
    (update,) = [c for c in plan["changes"] if c["action"] == "update"]
    assert update["fields"] == {"interval_sec": [600, 3600]}
    studio.client.post("/api/schedule-sets/apply", content=SET_YAML, headers=YAML)
    restored = studio.client.get(f"/api/schedules/{hourly['id']}").json()
    assert (restored["interval_sec"], restored["drifted"], restored["warnings"]) == (
        3600,
        False,
        [],
    )


def test_invalid_documents_are_422_with_every_error_and_write_nothing(studio: Any) -> None:
    bad = SET_YAML.replace("every: 1h", "every: soon").replace("cron:", "crn:")
    for route in ("/api/schedule-sets/plan", "/api/schedule-sets/apply"):
        answer = studio.client.post(route, content=bad, headers=YAML)
        assert answer.status_code == 422, answer.text
        paths = [e["path"] for e in answer.json()["errors"]]
        assert "schedules.nightly.trigger.crn" in paths
        assert "schedules.hourly.trigger.every" in paths
    malformed = studio.client.post("/api/schedule-sets/apply", content="a: [", headers=YAML)
    assert malformed.status_code == 422
    (error,) = malformed.json()["errors"]
    assert (error["line"], error["column"]) == (1, 5)
    named = SET_YAML.replace("  hourly:", "  Hourly Job:")
    answer = studio.client.post("/api/schedule-sets/apply", content=named, headers=YAML)
    assert answer.status_code == 422 and "'Hourly Job'" in answer.text
    assert studio.client.get("/api/schedules").json()["total"] == 0


def test_a_plan_with_errors_is_409_and_nothing_is_written(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    held = studio.client.post("/api/schedules", json=command_schedule("team-a/hourly"))
    assert held.status_code == 201
    before = _count(studio, "SELECT count(*) AS n FROM status_transitions")
    answer = studio.client.post("/api/schedule-sets/apply", content=SET_YAML, headers=YAML)
    assert answer.status_code == 409, answer.text
    body = answer.json()
    assert [e["name"] for e in body["errors"]] == ["team-a/hourly"]
    assert "unowned schedule" in body["detail"]
    assert studio.client.get("/api/schedules").json()["total"] == 1
    assert _count(studio, "SELECT count(*) AS n FROM status_transitions") == before
    plan = studio.client.post("/api/schedule-sets/plan", content=SET_YAML, headers=YAML)
    assert plan.status_code == 200
    assert [c["action"] for c in plan.json()["changes"]] == ["create", "error"]


def test_a_document_too_large_or_with_too_many_members_is_refused(serve: Any) -> None:
    studio = serve(max_body_bytes=16 * 1024 * 1024)  # the route's own bound is the smaller
    huge = "#" * (10 * 1024 * 1024)
    for route in ("/api/schedule-sets/plan", "/api/schedule-sets/apply"):
        answer = studio.client.post(route, content=huge, headers=YAML)
        assert answer.status_code == 413, answer.text
        assert answer.json() == {
            "detail": "body: is 10485760 bytes; a ScheduleSet document must be smaller than "
            "10485760 bytes",
            "field": "body",
        }
    many = ", ".join(f"m{i}: {{}}" for i in range(10_001))
    crowded = f"{SET_HEADER}metadata: {{name: x}}\nschedules: {{{many}}}\n"
    answer = studio.client.post("/api/schedule-sets/apply", content=crowded, headers=YAML)
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["errors"]  # one error: the members were never checked
    assert (error["path"], error["message"]) == (
        "schedules",
        "holds 10001 members; a document holds at most 10000",
    )
    assert studio.client.get("/api/schedules").json()["total"] == 0


KEEP = set_member("1h", argv=("sh", "-c", "true"))
BUSY = set_document(
    "team-a", {"keep": KEEP, "busy": set_member("1h", argv=("sh", "-c", "sleep 120"))}
)


def test_a_forced_prune_cancels_in_the_apply_and_a_refused_one_cancels_nothing(
    studio: Any, command_schedule: Callable[..., dict[str, Any]], wait: Any, alive: Any
) -> None:
    assert studio.client.post("/api/schedule-sets/apply", content=BUSY, headers=YAML).is_success
    busy = next(
        s for s in studio.client.get("/api/schedules").json()["schedules"] if "busy" in s["name"]
    )
    run_id = studio.client.post(f"/api/schedules/{busy['id']}/trigger").json()["run_id"]

    def pid() -> int | None:
        found = studio.client.get(f"/api/schedules/runs/{run_id}").json()["child_pid"]
        return None if found is None else int(found)

    child = wait(pid)
    without_busy = set_document("team-a", {"keep": KEEP})
    unforced = studio.client.post(
        "/api/schedule-sets/apply?prune=1", content=without_busy, headers=YAML
    )
    assert unforced.status_code == 409 and "--force" in unforced.json()["detail"]
    assert studio.client.post("/api/schedules", json=command_schedule("team-a/held")).is_success
    held = set_document("team-a", {"keep": KEEP, "held": KEEP})
    refused = studio.client.post(
        "/api/schedule-sets/apply?prune=1&force=1", content=held, headers=YAML
    )
    assert refused.status_code == 409, refused.text
    assert [e["name"] for e in refused.json()["errors"]] == ["team-a/held"]
    run = studio.client.get(f"/api/schedules/runs/{run_id}").json()
    assert run["status"] == "running" and alive(child)

    forced = studio.client.post(
        "/api/schedule-sets/apply?prune=1&force=1", content=without_busy, headers=YAML
    )
    assert forced.status_code == 200, forced.text
    assert forced.json()["applied"]["deleted"] == 1
    assert forced.json()["applied"]["cancelled"] == [run_id]
    assert studio.client.get(f"/api/schedules/{busy['id']}").status_code == 404
    wait(lambda: not alive(child))
    moves = studio.db_rows(
        "SELECT previous_status, status, reason_code, actor FROM status_transitions "
        "WHERE entity_id = ? AND status = 'cancelled'",
        run_id,
    )
    assert [tuple(m.values()) for m in moves] == [
        ("running", "cancelled", "run.cancelled.operator", "set:team-a")
    ]
