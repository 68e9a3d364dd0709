"""The dashboard's create form and Delete / force-delete over HTTP against a served Studio."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from studio_api._dashboard._forms import argv_lines, schedule_body


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found, html[:2000]
    return found.group(1)


def test_the_form_becomes_the_api_body_of_the_chosen_trigger_and_kind() -> None:
    form = {
        "name": "n",
        "trigger_type": "interval",
        "interval_sec": " 60 ",
        "cron_expr": "* * * * *",  # typed under the other trigger: not sent
        "action_kind": "command",
        "action_command": "python3",
        "action_command_args": "-c\r\nprint('a b')\r\n\r\n",
        "action_prompt": "not sent either",
        "timezone": "",
        "timeout_sec": "90",
        "enabled": "on",
    }
    assert schedule_body(form) == {
        "name": "n",
        "trigger_type": "interval",
        "interval_sec": 60,
        "action_kind": "command",
        "action_command": "python3",
        "action_command_args": ["-c", "print('a b')"],
        "timeout_sec": 90,
        "enabled": True,
    }
    agent = schedule_body(
        {
            "trigger_type": "cron",
            "cron_expr": "0 9 * * *",
            "action_kind": "agent",
            "action_prompt": "summarise",
            "action_command": "sh",
        }
    )
    assert agent == {
        "name": "",
        "trigger_type": "cron",
        "cron_expr": "0 9 * * *",
        "action_kind": "agent",
        "action_prompt": "summarise",
        "enabled": False,
    }
    assert argv_lines("a\n\n  \nb c") == ["a", "b c"]
    # a duration with its unit goes as typed; whole seconds as an integer
    typed = {"trigger_type": "interval", "interval_sec": " 15m ", "timeout_sec": "0090"}
    assert schedule_body(typed)["interval_sec"] == "15m"
    assert schedule_body(typed)["timeout_sec"] == 90


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"interval_sec": "soon"}, "interval_sec", "duration"),
        ({"interval_sec": "0"}, "interval_sec", ""),
        ({"timezone": "Mars/Olympus"}, "timezone", "Mars/Olympus"),
        ({"timeout_sec": "-5"}, "timeout_sec", ""),
        ({"action_command": "/bin/sh"}, "action_command", "bare command"),
        ({"name": ""}, "name", "required"),
        ({"trigger_type": "cron", "cron_expr": ""}, "cron_expr", "required"),
    ],
)
def test_a_refused_form_shows_the_api_message_beside_its_field(
    studio: Any, fields: dict[str, str], field: str, words: str
) -> None:
    csrf = csrf_of(studio.client.get("/schedules").text)
    form = {
        "csrf": csrf,
        "name": "typed-name",
        "trigger_type": "interval",
        "interval_sec": "60",
        "action_kind": "command",
        "action_command": "sh",
        "action_command_args": "-c\necho hi",
        "timezone": "",
        "timeout_sec": "",
        "enabled": "on",
        **fields,
    }
    api = studio.client.post("/api/schedules", json=schedule_body(form))
    assert api.status_code == 422 and api.json()["field"].split(".")[0] == field, api.text
    page = studio.client.post("/schedules", data=form)
    assert page.status_code == 422
    detail = api.json()["detail"]
    assert words in detail
    escaped = detail.replace("&", "&amp;").replace("'", "&#39;").replace('"', "&#34;")
    assert f'id="error-{field}" role="alert"' in page.text
    assert escaped in page.text.split(f'id="error-{field}"', 1)[1][:2000]
    assert 'aria-invalid="true"' in page.text
    for name in ("name", "interval_sec", "timezone", "action_command"):
        assert f'name="{name}" value="{form[name]}"' in page.text, name
    assert "-c\necho hi</textarea>" in page.text
    assert studio.client.get("/api/schedules").json()["total"] == 0


def test_create_without_a_token_or_with_a_taken_name(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    studio.client.post("/api/schedules", json=command_schedule("taken"))
    assert studio.client.post("/schedules", data={"name": "x"}).status_code == 403
    csrf = csrf_of(studio.client.get("/schedules").text)
    form = {
        "csrf": csrf,
        "name": "taken",
        "trigger_type": "interval",
        "interval_sec": "60",
        "action_kind": "command",
        "action_command": "sh",
        "enabled": "on",
    }
    page = studio.client.post("/schedules", data=form)
    assert page.status_code == 409 and 'id="error-name"' in page.text
    made = studio.client.post("/schedules", data={**form, "name": "fresh"})
    assert made.status_code == 303
    assert parse_qs(urlsplit(made.headers["location"]).query)["notice"] == [
        "Schedule fresh created"
    ]
    assert studio.client.get("/api/schedules").json()["total"] == 2


def test_delete_refused_while_running_then_forced(
    serve: Callable[..., Any],
    command_schedule: Callable[..., dict[str, Any]],
    script: Callable[[str, str], Any],
    wait: Callable[..., Any],
    alive: Callable[[int], bool],
) -> None:
    studio = serve()
    sleeper = script("sleep.sh", "sleep 120\n")
    sid = studio.client.post("/api/schedules", json=command_schedule("busy", sleeper)).json()["id"]
    run_id = studio.client.post(f"/api/schedules/{sid}/trigger").json()["run_id"]
    wait(lambda: studio.client.get(f"/api/schedules/runs/{run_id}").json().get("child_pid"))
    pid = int(studio.client.get(f"/api/schedules/runs/{run_id}").json()["child_pid"])

    confirm = studio.client.get(f"/schedules/{sid}/delete", params={"back": "/schedules"})
    assert confirm.status_code == 200 and "1 running" in confirm.text
    assert "Cancel runs and delete" not in confirm.text
    csrf = csrf_of(confirm.text)
    refused = studio.client.post(f"/schedules/{sid}/delete", data={"csrf": csrf})
    assert refused.status_code == 303
    api = studio.client.delete(f"/api/schedules/{sid}").json()["detail"]
    again = studio.client.get(refused.headers["location"])
    assert api in again.text.replace("&#39;", "'") and "Cancel runs and delete" in again.text
    assert alive(pid) and studio.client.get(f"/api/schedules/{sid}").status_code == 200

    forced = studio.client.post(f"/schedules/{sid}/force-delete", data={"csrf": csrf})
    assert forced.status_code == 303 and forced.headers["location"].startswith("/schedules?")
    assert studio.client.get(f"/api/schedules/{sid}").status_code == 404
    reasons = studio.db_rows(
        "SELECT reason_code FROM status_transitions WHERE entity_id = ? AND status = 'cancelled'",
        run_id,
    )
    assert [r["reason_code"] for r in reasons] == ["run.cancelled.operator"]
    wait(lambda: not alive(pid))
    gone = studio.client.get(f"/schedules/{sid}/delete")
    assert gone.status_code == 404
