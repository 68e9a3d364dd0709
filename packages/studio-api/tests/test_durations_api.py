"""Durations, ``at`` and ``rate_limit`` through the real app on uvicorn (DESIGN §11.2, §11.5a):
a seconds field takes ``"90s"``/``"15m"``/``"2h"``/``"1d"`` and answers integer seconds."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any


def test_seconds_fields_take_durations_and_answer_seconds(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    body = command_schedule(
        "durations",
        interval_sec="15m",
        timeout_sec="2h",
        jitter_sec="90s",
        catchup_window_sec="1d",
        rate_limit={"max_fires": 4, "window_sec": "1h"},
        retry={"max_attempts": 2, "backoff_sec": "30s"},
    )
    answer = studio.client.post("/api/schedules", json=body)
    assert answer.status_code == 201, answer.text
    created = answer.json()
    assert created["interval_sec"] == 900 and created["timeout_sec"] == 7200
    assert created["jitter_sec"] == 90 and created["catchup_window_sec"] == 86400
    assert created["rate_limit"] == {"max_fires": 4, "window_sec": 3600}
    assert created["retry"]["backoff_sec"] == 30
    patched = studio.client.patch(f"/api/schedules/{created['id']}", json={"interval_sec": "2h"})
    assert patched.status_code == 200, patched.text
    assert patched.json()["interval_sec"] == 7200


def test_bad_durations_are_422_naming_the_field(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    for field, value in (("interval_sec", "15 minutes"), ("timeout_sec", "2w")):
        answer = studio.client.post(
            "/api/schedules", json=command_schedule("bad", **{field: value})
        )
        assert answer.status_code == 422, answer.text
        assert field in answer.text
    answer = studio.client.post(
        "/api/schedules",
        json=command_schedule("bad", rate_limit={"max_fires": 1, "window_sec": "soon"}),
    )
    assert answer.status_code == 422 and answer.json()["field"] == "rate_limit.window_sec"
    assert studio.client.get("/api/schedules").json()["total"] == 0


def test_at_keeps_its_instant_as_given_and_refuses_the_past(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    when = datetime.now(timezone(timedelta(hours=1))) + timedelta(days=2)
    text = when.replace(microsecond=0).isoformat()
    body = command_schedule("once", trigger_type="at", at=text)
    body.pop("interval_sec")
    answer = studio.client.post("/api/schedules", json=body)
    assert answer.status_code == 201, answer.text
    created = answer.json()
    assert created["trigger_type"] == "at" and created["at"] == text
    assert created["next_fire_at"] == when.replace(microsecond=0).timestamp()
    listed = studio.client.get("/api/schedules", params={"trigger_type": "at"}).json()
    assert [s["id"] for s in listed["schedules"]] == [created["id"]]

    past = datetime.fromtimestamp(time.time() - 3600, UTC).isoformat()
    answer = studio.client.post("/api/schedules", json={**body, "name": "late", "at": past})
    assert answer.status_code == 422 and answer.json()["field"] == "at"
    answer = studio.client.post(
        "/api/schedules",
        json={**body, "name": "late", "at": past, "missed_fire_policy": "run_once"},
    )
    assert answer.status_code == 201, answer.text
