"""Hardened edges of the served app: every number has a bound (422 naming the field), the
durability mode is a validated setting the app's connection uses, and the child environment
goes without the secrets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from studio_api import FIELD_LIMITS, SettingsError, StudioSettings

DAY = 86_400
BASE = {
    "name": "huge",
    "trigger_type": "interval",
    "interval_sec": 60,
    "action_kind": "agent",
    "action_prompt": "p",
}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"interval_sec": 99999999999999999}, "interval_sec"),
        ({"interval_sec": 366 * DAY + 1}, "interval_sec"),
        ({"poll_interval_sec": DAY + 1}, "poll_interval_sec"),
        ({"max_runs": 2**31}, "max_runs"),
        ({"max_runs": -(2**31) - 1}, "max_runs"),
        ({"budget_tokens": 2**31}, "budget_tokens"),
        ({"budget_usd": 1e9 + 1}, "budget_usd"),
        ({"budget_usd": 1e300}, "budget_usd"),
    ],
)
def test_numbers_beyond_their_bound_are_422_naming_the_field(
    studio: Any, changes: dict[str, Any], field: str
) -> None:
    created = studio.client.post("/api/schedules", json={**BASE, **changes})
    assert created.status_code == 422, created.text
    assert created.json()["field"] == field
    assert created.json()["detail"].startswith(f"{field}: ")
    assert studio.client.get("/api/schedules").json()["total"] == 0
    kept = studio.client.post("/api/schedules", json={**BASE, "name": "kept"}).json()
    updated = studio.client.patch(f"/api/schedules/{kept['id']}", json=changes)
    assert updated.status_code == 422 and updated.json()["field"] == field


def test_the_largest_values_in_range_are_stored_and_previewed(studio: Any) -> None:
    body = {
        **BASE,
        "interval_sec": int(FIELD_LIMITS["interval_sec"]),
        "max_runs": 2**31 - 1,
        "budget_tokens": 2**31 - 1,
        "budget_usd": 1e9,
    }
    created = studio.client.post("/api/schedules", json=body)
    assert created.status_code == 201, created.text
    preview = studio.client.get(f"/api/schedules/{created.json()['id']}/preview", params={"n": 3})
    assert preview.status_code == 200, preview.text


@pytest.mark.parametrize(("mode", "reported"), [(None, "full"), ("normal", "normal")])
def test_health_reports_the_durability_mode_of_the_connection(
    serve: Callable[..., Any], mode: str | None, reported: str
) -> None:
    studio = serve() if mode is None else serve(synchronous=mode)
    health = studio.client.get("/api/health").json()
    assert health["database"] == {"synchronous": reported, "problem": None, "problem_since": None}


@pytest.mark.parametrize("value", ["fast", "off", "extra", "2"])
def test_an_invalid_synchronous_setting_names_the_variable(value: str) -> None:
    with pytest.raises(SettingsError) as caught:
        StudioSettings.from_env({"LIONAGI_STUDIO_SYNCHRONOUS": value})
    assert caught.value.variable == "LIONAGI_STUDIO_SYNCHRONOUS"
    assert "'full' or 'normal'" in str(caught.value)


def test_the_child_environment_drops_the_secrets_unless_passed() -> None:
    environ = {
        "PATH": "/usr/bin",
        "LIONAGI_STUDIO_AUTH_TOKEN": "t",
        "LIONAGI_STUDIO_WEBHOOK_SECRET": "w",
        "GITHUB_TOKEN": "g",
    }
    default = StudioSettings.from_env({}).child_environment(environ)
    assert default == {"PATH": "/usr/bin"}
    passing = StudioSettings.from_env({"LIONAGI_SCHEDULER_CHILD_ENV_PASS": " GITHUB_TOKEN ,"})
    assert passing.child_env_pass == ("GITHUB_TOKEN",)
    assert passing.child_environment(environ) == {"PATH": "/usr/bin", "GITHUB_TOKEN": "g"}
    with pytest.raises(SettingsError) as caught:
        StudioSettings.from_env({"LIONAGI_SCHEDULER_CHILD_ENV_PASS": "A B"})
    assert caught.value.variable == "LIONAGI_SCHEDULER_CHILD_ENV_PASS"
