"""Notify on schedules and ad-hoc runs, ``POST /api/dispatch``, the webhook secret setting."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from studio_api import SettingsError, StudioSettings

HOOK = "https://hooks.example.test/studio"
SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


@pytest.mark.parametrize(
    ("notify", "field"),
    [
        ({"deliver_to": HOOK, "on": []}, "notify.on"),
        ({"deliver_to": HOOK, "on": ["failed", "boom"]}, "notify.on"),
        ({"deliver_to": HOOK, "colour": "red"}, "notify.colour"),
        ({"deliver_to": HOOK, "max_attempts": 0}, "notify.max_attempts"),
        ({"deliver_to": "http:/x"}, "notify.deliver_to"),
    ],
)
def test_bad_notify_is_422_naming_the_key(
    studio: Any, command_schedule: Any, notify: dict[str, Any], field: str
) -> None:
    answer = studio.client.post("/api/schedules", json=command_schedule("n", notify=notify))
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == field
    run = studio.client.post(
        "/api/runs",
        json={"action_kind": "command", "action_command": "sh", "notify": notify},
    )
    assert run.status_code == 422 and run.json()["field"] == field
    assert studio.db_rows("SELECT id FROM schedules") == []
    assert studio.db_rows("SELECT id FROM schedule_runs") == []


def test_notify_is_stored_returned_updated_and_cleared(studio: Any, command_schedule: Any) -> None:
    created = studio.client.post(
        "/api/schedules", json=command_schedule("n", notify={"deliver_to": HOOK})
    )
    assert created.status_code == 201, created.text
    schedule = created.json()
    assert schedule["notify"] == {
        "deliver_to": HOOK,
        "on": ["failed", "timed_out", "disabled"],
        "ack_required": False,
        "max_attempts": 8,
    }
    changed = studio.client.patch(
        f"/api/schedules/{schedule['id']}",
        json={"notify": {"deliver_to": HOOK, "on": ["completed"], "ack_required": True}},
    )
    assert changed.status_code == 200 and changed.json()["notify"]["on"] == ["completed"]
    cleared = studio.client.patch(f"/api/schedules/{schedule['id']}", json={"notify": None})
    assert cleared.status_code == 200 and cleared.json()["notify"] is None


def test_post_dispatch_creates_then_answers_the_dedup_hit(studio: Any) -> None:
    body = {
        "kind": "deploy.finished",
        "deliver_to": "ops",
        "body": {"sha": "abc"},
        "dedup_key": "deploy:abc",
        "ack_required": True,
    }
    first = studio.client.post("/api/dispatch", json=body)
    assert first.status_code == 201, first.text
    assert first.json()["created"] is True
    again = studio.client.post("/api/dispatch", json=body)
    assert again.status_code == 200
    assert again.json() == {"id": first.json()["id"], "created": False}
    (row,) = studio.db_rows("SELECT * FROM dispatch_outbox")
    assert (row["kind"], row["ack_required"], row["dedup_key"]) == (
        "deploy.finished",
        1,
        "deploy:abc",
    )
    shown = studio.client.get(f"/api/dispatch/{row['id']}").json()
    assert shown["payload"]["body"] == {"sha": "abc"} and "ack_token" not in str(shown)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "", "deliver_to": "ops"}, "kind"),
        ({"kind": "k", "deliver_to": "http:/x"}, "deliver_to"),
        ({"kind": "k", "deliver_to": "ops", "max_attempts": 0}, "max_attempts"),
        ({"kind": "k", "deliver_to": "ops", "surprise": 1}, "surprise"),
        ({"deliver_to": "ops"}, "kind"),
    ],
)
def test_post_dispatch_refuses_bad_input(studio: Any, body: dict[str, Any], field: str) -> None:
    answer = studio.client.post("/api/dispatch", json=body)
    assert answer.status_code == 422, answer.text
    assert field in (answer.json().get("field") or "")
    assert studio.db_rows("SELECT id FROM dispatch_outbox") == []


def test_post_dispatch_needs_the_token_like_every_route(serve: Any) -> None:
    studio = serve(auth_token="t0ken-for-tests")
    import httpx

    bare = httpx.post(f"{studio.base_url}/api/dispatch", json={"kind": "k", "deliver_to": "o"})
    assert bare.status_code == 401
    authed = studio.client.post("/api/dispatch", json={"kind": "k", "deliver_to": "o"})
    assert authed.status_code == 201


@pytest.mark.parametrize("value", ["nope", "whsec_", "whsec_!!!", "secret_" + SECRET[6:]])
def test_a_bad_webhook_secret_refuses_startup_naming_the_variable(value: str) -> None:
    with pytest.raises(SettingsError) as caught:
        StudioSettings.from_env({"LIONAGI_STUDIO_WEBHOOK_SECRET": value})
    assert str(caught.value).startswith("LIONAGI_STUDIO_WEBHOOK_SECRET: ")
    if len(value) > 8:
        assert value not in str(caught.value)


def test_a_good_secret_signs_and_never_reaches_children(serve: Any) -> None:
    settings = StudioSettings.from_env({"LIONAGI_STUDIO_WEBHOOK_SECRET": SECRET})
    assert SECRET not in repr(settings) and SECRET not in repr(settings.to_scheduler_settings())
    assert "LIONAGI_STUDIO_WEBHOOK_SECRET" not in settings.child_environment(
        {"LIONAGI_STUDIO_WEBHOOK_SECRET": SECRET, "PATH": "/bin"}
    )
    studio = serve(webhook_secret=SECRET)
    webhook = studio.client.get("/api/health").json()["dispatch"]["transports"]["webhook"]
    assert webhook == {"state": "active", "reason": None, "signed": True}
