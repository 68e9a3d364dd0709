"""An ``at`` schedule that already fired, enabled again through the real app on uvicorn:
``POST …/enable`` with its passed instant is 409 naming ``at`` (nothing written, it never fires
again); after a ``PATCH`` giving it a new future ``at``, the enable re-arms it for that instant.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any


def _instant(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).replace(microsecond=0).isoformat()


def test_a_fired_at_is_enabled_again_only_with_a_new_instant(
    studio: Any, command_schedule: Callable[..., dict[str, Any]], wait: Any
) -> None:
    body = command_schedule("once", trigger_type="at", at=_instant(2))
    del body["interval_sec"]
    created = studio.client.post("/api/schedules", json=body)
    assert created.status_code == 201, created.text
    sid = created.json()["id"]

    def handled() -> bool:
        row = studio.client.get(f"/api/schedules/{sid}").json()
        return not row["enabled"] and row["disabled_reason"] == "schedule.disabled.once"

    wait(handled, timeout=30)
    runs = studio.client.get(f"/api/schedules/{sid}/runs").json()["total"]
    assert runs == 1
    moves = len(studio.db_rows("SELECT id FROM status_transitions WHERE entity_id = ?", sid))

    refused = studio.client.post(f"/api/schedules/{sid}/enable")
    assert refused.status_code == 409, refused.text
    refusal = refused.json()
    assert (refusal["field"], refusal["reason_code"]) == ("at", "schedule.enable.at_passed")
    assert f"at: '{body['at']}' has passed" in refusal["detail"]
    assert not studio.client.get(f"/api/schedules/{sid}").json()["enabled"]
    after = studio.db_rows("SELECT id FROM status_transitions WHERE entity_id = ?", sid)
    assert len(after) == moves
    same = studio.client.patch(f"/api/schedules/{sid}", json={"at": body["at"]})
    assert same.status_code == 200  # the same instant: still refused
    assert studio.client.post(f"/api/schedules/{sid}/enable").status_code == 409

    later = _instant(3600)
    moved = studio.client.patch(f"/api/schedules/{sid}", json={"at": later})
    assert moved.status_code == 200 and not moved.json()["enabled"]
    again = studio.client.post(f"/api/schedules/{sid}/enable")
    assert again.status_code == 200, again.text
    assert (again.json()["enabled"], again.json()["at"]) == (True, later)
    assert again.json()["next_fire_at"] == datetime.fromisoformat(later).timestamp()
    assert studio.client.get(f"/api/schedules/{sid}/runs").json()["total"] == 1
