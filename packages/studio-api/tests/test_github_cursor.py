"""``PATCH /api/schedules/{id}`` with ``github_cursor`` through the real app on uvicorn: set,
reset (null), 422 for a malformed value or a schedule that does not poll GitHub."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def _github_body(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "trigger_type": "github_poll",
        "github_repo": "octo/repo",
        "action_kind": "command",
        "action_command": "sh",
        "action_command_args": ["-c", "true"],
    }


def test_patch_sets_and_resets_the_cursor(studio: Any) -> None:
    created = studio.client.post("/api/schedules", json=_github_body("prs"))
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    assert created.json()["github_cursor"] is None
    answer = studio.client.patch(
        f"/api/schedules/{sid}",
        json={"github_cursor": "2027-01-05T09:00:00Z#42", "description": "prs"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["github_cursor"] == "2027-01-05T09:00:00Z#0000000042"
    assert answer.json()["description"] == "prs"
    shown = studio.client.get(f"/api/schedules/{sid}").json()
    assert shown["github_cursor"] == "2027-01-05T09:00:00Z#0000000042"
    reset = studio.client.patch(f"/api/schedules/{sid}", json={"github_cursor": None})
    assert reset.status_code == 200 and reset.json()["github_cursor"] is None


def test_patch_cursor_refusals_are_422(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    interval = studio.client.post("/api/schedules", json=command_schedule("plain")).json()
    answer = studio.client.patch(f"/api/schedules/{interval['id']}", json={"github_cursor": None})
    assert answer.status_code == 422 and answer.json()["field"] == "github_cursor"
    prs = studio.client.post("/api/schedules", json=_github_body("prs")).json()
    answer = studio.client.patch(
        f"/api/schedules/{prs['id']}", json={"github_cursor": "later", "description": "x"}
    )
    assert answer.status_code == 422 and answer.json()["field"] == "github_cursor"
    assert studio.client.get(f"/api/schedules/{prs['id']}").json()["description"] is None
    missing = studio.client.patch("/api/schedules/nope", json={"github_cursor": None})
    assert missing.status_code == 404


def test_a_patch_of_the_cursor_and_other_fields_is_one_transaction(studio: Any) -> None:
    prs = studio.client.post("/api/schedules", json=_github_body("prs")).json()
    sid = prs["id"]

    def moves() -> list[dict[str, Any]]:
        return studio.db_rows(
            "SELECT reason_code, metadata FROM status_transitions WHERE entity_id = ?", sid
        )

    before = len(moves())
    answer = studio.client.patch(
        f"/api/schedules/{sid}",
        json={"github_cursor": "2027-01-05T09:00:00Z#7", "description": "prs", "timeout_sec": 60},
    )
    assert answer.status_code == 200, answer.text
    after = moves()
    assert len(after) == before + 1  # one change, one transition row
    (move,) = [m for m in after if m["reason_code"] == "schedule.updated.operator"]
    assert json.loads(move["metadata"]) == {
        "fields": ["description", "github_cursor", "timeout_sec"],
        "old": None,
        "new": "2027-01-05T09:00:00Z#0000000007",
    }

    # the cursor refused once the other changes apply (no longer a github_poll): nothing written
    switch = {
        "trigger_type": "interval",
        "interval_sec": 60,
        "github_repo": None,
        "description": "switched",
        "github_cursor": "2027-01-06T09:00:00Z",
    }
    refused = studio.client.patch(f"/api/schedules/{sid}", json=switch)
    assert refused.status_code == 422 and refused.json()["field"] == "github_cursor"
    shown = studio.client.get(f"/api/schedules/{sid}").json()
    assert (shown["trigger_type"], shown["description"]) == ("github_poll", "prs")
    assert shown["github_cursor"] == "2027-01-05T09:00:00Z#0000000007"
    assert len(moves()) == before + 1
