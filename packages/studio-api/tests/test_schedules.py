"""Every /api/schedules route through the real app on uvicorn: success and error answers."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HEX12 = re.compile(r"[0-9a-f]{12}")


def _create(studio: Any, body: dict[str, Any]) -> dict[str, Any]:
    answer = studio.client.post("/api/schedules", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def _run(studio: Any, run_id: str) -> dict[str, Any] | None:
    answer = studio.client.get(f"/api/schedules/runs/{run_id}")
    if answer.status_code == 404:
        return None
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _finished(studio: Any, run_id: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        run = _run(studio, run_id)
        return run if run and run["status"] not in ("running", "queued") else None

    return check


# -- create ----------------------------------------------------------------------------------


def test_create_answers_201_with_the_stored_schedule(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    body = command_schedule("nightly", description="d", max_runs=5, budget_usd=1.5)
    created = _create(studio, body)
    assert HEX12.fullmatch(created["id"])
    assert created["name"] == "nightly" and created["description"] == "d"
    assert created["enabled"] is True
    assert created["next_fire_at"] is not None
    assert created["action_command_args"] == body["action_command_args"]
    assert created["max_runs"] == 5 and created["budget_usd"] == 1.5
    assert "ack_token" not in created
    assert studio.client.get(f"/api/schedules/{created['id']}").json() == created


def test_create_cron_and_disabled(studio: Any, command_schedule: Callable[..., Any]) -> None:
    body = command_schedule("cron", trigger_type="cron", interval_sec=None, cron_expr="0 3 * * *")
    body.pop("interval_sec")
    created = _create(studio, {**body, "enabled": False})
    assert created["trigger_type"] == "cron" and created["cron_expr"] == "0 3 * * *"
    assert created["enabled"] is False


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"interval_sec": 0}, "interval_sec"),
        ({"interval_sec": -5}, "interval_sec"),
        ({"trigger_type": "cron", "cron_expr": "not a cron"}, "cron_expr"),
        ({"action_command": "rm"}, "action_command"),
        ({"action_cwd": "/nonexistent/studio/dir"}, "action_cwd"),
        ({"action_cwd": "relative/dir"}, "action_cwd"),
        ({"max_runs": 0}, "max_runs"),
        ({"budget_usd": -1}, "budget_usd"),
        ({"name": " padded "}, "name"),
        ({"on_success": {"id": "other"}}, "on_success.id"),
        ({"threshold_config": {"metric": "nope"}}, "threshold_config.op"),
    ],
)
def test_create_refusals_are_422_naming_the_field(
    studio: Any, command_schedule: Callable[..., Any], changes: dict[str, Any], field: str
) -> None:
    body = {**command_schedule("bad"), **changes}
    if changes.get("trigger_type") == "cron":
        body.pop("interval_sec")
    answer = studio.client.post("/api/schedules", json=body)
    assert answer.status_code == 422, answer.text
    error = answer.json()
    assert error["field"].startswith(field.split(".")[0]), error
    assert error["detail"].startswith(f"{error['field']}: ")
    assert studio.client.get("/api/schedules").json()["total"] == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"trigger_type": "interval", "action_kind": "agent"}, "name"),
        ({"name": "x", "trigger_type": "weekly", "action_kind": "agent"}, "trigger_type"),
        ({"name": "x", "trigger_type": "interval", "action_kind": "engine"}, "action_kind"),
        ({"name": "x", "trigger_type": "interval", "action_kind": "agent", "bogus": 1}, "bogus"),
        ({"name": 5, "trigger_type": "interval", "action_kind": "agent"}, "name"),
        (
            {
                "name": "x",
                "trigger_type": "interval",
                "action_kind": "agent",
                "interval_sec": 2**70,
            },
            "interval_sec",
        ),
        (
            {"name": "x", "trigger_type": "interval", "action_kind": "agent", "interval_sec": "9x"},
            "interval_sec",
        ),
        (
            {"name": "x", "trigger_type": "interval", "action_kind": "agent", "on_fail": [1]},
            "on_fail",
        ),
        (
            {"name": "x", "trigger_type": "interval", "action_kind": "agent", "enabled": "maybe"},
            "enabled",
        ),
    ],
)
def test_create_body_shape_errors_are_422_naming_the_field(
    studio: Any, body: dict[str, Any], field: str
) -> None:
    answer = studio.client.post("/api/schedules", json=body)
    assert answer.status_code == 422, answer.text
    error = answer.json()
    assert error["field"] == field, error
    assert error["detail"].startswith(f"{field}: ")
    assert any(e["field"] == field for e in error["errors"])


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"{not json", "body"),
        (b"\xff\xfe\x00garbage", "body"),
        (b"[1, 2]", "body"),
        (b'{"name": "\\ud800", "trigger_type": "interval", "action_kind": "agent"}', "name"),
        (
            b'{"name": "x", "trigger_type": "interval", "action_kind": "agent", "budget_usd": NaN}',
            "budget_usd",
        ),
        (
            b'{"name": "x", "trigger_type": "interval", "action_kind": "agent", '
            b'"interval_sec": 1e400}',
            "interval_sec",
        ),
        (
            b'{"name": "x", "trigger_type": "interval", "action_kind": "agent", '
            b'"github_filter": {"k": Infinity}}',
            "github_filter",
        ),
        (
            b'{"name": "x", "trigger_type": "interval", "action_kind": "agent", '
            b'"threshold_config": {"v": 99999999999999999999999}}',
            "threshold_config",
        ),
        (b"", "body"),
    ],
)
def test_malformed_bodies_are_422(studio: Any, raw: bytes, field: str) -> None:
    answer = studio.client.post(
        "/api/schedules", content=raw, headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == field


def test_create_with_a_taken_name_is_409(studio: Any, command_schedule: Callable[..., Any]) -> None:
    _create(studio, command_schedule("twice"))
    answer = studio.client.post("/api/schedules", json=command_schedule("twice"))
    assert answer.status_code == 409
    assert answer.json()["field"] == "name" and "twice" in answer.json()["detail"]
    assert studio.client.get("/api/schedules").json()["total"] == 1


# -- read, list, pagination ------------------------------------------------------------------


def test_get_unknown_is_404(studio: Any) -> None:
    answer = studio.client.get("/api/schedules/000000000000")
    assert answer.status_code == 404
    assert answer.json()["field"] == "schedule_id" and "000000000000" in answer.json()["detail"]


def test_list_is_paginated_with_a_total(studio: Any, command_schedule: Callable[..., Any]) -> None:
    ids = [_create(studio, command_schedule(f"s{i}"))["id"] for i in range(7)]
    _create(studio, {**command_schedule("off"), "enabled": False})
    page = studio.client.get("/api/schedules", params={"limit": 3}).json()
    assert page["total"] == 8 and page["limit"] == 3 and page["offset"] == 0
    assert len(page["schedules"]) == 3
    seen: list[str] = []
    for offset in range(0, 8, 3):
        chunk = studio.client.get("/api/schedules", params={"limit": 3, "offset": offset}).json()
        assert chunk["total"] == 8
        seen += [s["id"] for s in chunk["schedules"]]
    assert len(seen) == 8 and set(ids) <= set(seen)
    beyond = studio.client.get("/api/schedules", params={"offset": 100}).json()
    assert beyond == {"schedules": [], "total": 8, "limit": 100, "offset": 100}
    enabled = studio.client.get("/api/schedules", params={"enabled": "true"}).json()
    assert enabled["total"] == 7
    disabled = studio.client.get("/api/schedules", params={"enabled": "false"}).json()
    assert disabled["total"] == 1 and disabled["schedules"][0]["name"] == "off"
    cron = studio.client.get("/api/schedules", params={"trigger_type": "cron"}).json()
    assert cron["total"] == 0
    # unknown query keys are ignored
    assert studio.client.get("/api/schedules", params={"colour": "red"}).json()["total"] == 8


def test_list_has_no_silent_cap(studio: Any, command_schedule: Callable[..., Any]) -> None:
    for i in range(3):
        _create(studio, command_schedule(f"c{i}"))
    page = studio.client.get("/api/schedules", params={"limit": 1000}).json()
    assert page["total"] == 3 == len(page["schedules"])


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"offset": -1}, "offset"),
        ({"offset": 2**64}, "offset"),
        ({"enabled": "perhaps"}, "enabled"),
        ({"trigger_type": "weekly"}, "trigger_type"),
    ],
)
def test_list_query_errors_are_422(studio: Any, params: dict[str, Any], field: str) -> None:
    answer = studio.client.get("/api/schedules", params=params)
    assert answer.status_code == 422
    assert answer.json()["field"] == field


# -- update, delete, enable, disable ---------------------------------------------------------


def test_patch_changes_only_what_is_sent(studio: Any, command_schedule: Callable[..., Any]) -> None:
    created = _create(studio, command_schedule("p", description="before"))
    answer = studio.client.patch(
        f"/api/schedules/{created['id']}", json={"interval_sec": 60, "description": None}
    )
    assert answer.status_code == 200, answer.text
    updated = answer.json()
    assert updated["interval_sec"] == 60 and updated["description"] is None
    assert updated["name"] == "p" and updated["action_command"] == "sh"
    assert updated["next_fire_at"] <= created["next_fire_at"]
    same = studio.client.patch(f"/api/schedules/{created['id']}", json={})
    assert same.status_code == 200 and same.json()["interval_sec"] == 60


def test_patch_errors(studio: Any, command_schedule: Callable[..., Any]) -> None:
    a = _create(studio, command_schedule("a"))
    _create(studio, command_schedule("b"))
    assert studio.client.patch("/api/schedules/nope", json={"interval_sec": 5}).status_code == 404
    taken = studio.client.patch(f"/api/schedules/{a['id']}", json={"name": "b"})
    assert taken.status_code == 409 and taken.json()["field"] == "name"
    bad = studio.client.patch(f"/api/schedules/{a['id']}", json={"interval_sec": 0})
    assert bad.status_code == 422 and bad.json()["field"] == "interval_sec"
    null = studio.client.patch(f"/api/schedules/{a['id']}", json={"name": None})
    assert null.status_code == 422 and null.json()["field"] == "name"
    extra = studio.client.patch(f"/api/schedules/{a['id']}", json={"enabled": False})
    assert extra.status_code == 422 and extra.json()["field"] == "enabled"
    missing = studio.client.patch(f"/api/schedules/{a['id']}")
    assert missing.status_code == 422
    assert studio.client.get(f"/api/schedules/{a['id']}").json()["interval_sec"] == 3600


def test_delete_answers_the_schedule_then_404(
    studio: Any, command_schedule: Callable[..., Any]
) -> None:
    created = _create(studio, command_schedule("gone"))
    answer = studio.client.delete(f"/api/schedules/{created['id']}")
    assert answer.status_code == 200 and answer.json()["id"] == created["id"]
    assert studio.client.get(f"/api/schedules/{created['id']}").status_code == 404
    assert studio.client.delete(f"/api/schedules/{created['id']}").status_code == 404


def test_disable_and_enable(studio: Any, command_schedule: Callable[..., Any]) -> None:
    created = _create(studio, command_schedule("toggle"))
    sid = created["id"]
    off = studio.client.post(f"/api/schedules/{sid}/disable", json={"reason": "maintenance"})
    assert off.status_code == 200, off.text
    assert off.json()["enabled"] is False and off.json()["disabled_reason"] == "maintenance"
    again = studio.client.post(f"/api/schedules/{sid}/disable")  # no body at all
    assert again.status_code == 200 and again.json()["enabled"] is False
    on = studio.client.post(f"/api/schedules/{sid}/enable")
    assert on.status_code == 200 and on.json()["enabled"] is True
    assert on.json()["next_fire_at"] is not None
    blank = studio.client.post(f"/api/schedules/{sid}/disable", json={"reason": "  "})
    assert blank.status_code == 422 and blank.json()["field"] == "reason"
    extra = studio.client.post(f"/api/schedules/{sid}/disable", json={"why": "x"})
    assert extra.status_code == 422 and extra.json()["field"] == "why"
    assert studio.client.post("/api/schedules/nope/enable").status_code == 404
    assert studio.client.post("/api/schedules/nope/disable").status_code == 404


# -- trigger, runs, chain children -----------------------------------------------------------


def test_trigger_runs_the_action(
    studio: Any,
    command_schedule: Callable[..., Any],
    script: Callable[..., Path],
    workdir: Path,
    wait: Any,
) -> None:
    ok = script("ok.sh", 'echo "$LIONAGI_INVOCATION_ID" > fired.txt\n')
    created = _create(studio, command_schedule("manual", ok))
    answer = studio.client.post(f"/api/schedules/{created['id']}/trigger")
    assert answer.status_code == 202, answer.text
    assert list(answer.json()) == ["run_id"]
    run_id = answer.json()["run_id"]
    assert HEX12.fullmatch(run_id)
    run = wait(_finished(studio, run_id))
    assert run["status"] == "completed" and run["exit_code"] == 0
    assert run["schedule_id"] == created["id"]
    assert (workdir / "fired.txt").read_text().strip() == run["invocation_id"]
    runs = studio.client.get(f"/api/schedules/{created['id']}/runs").json()
    assert runs["total"] == 1 and runs["runs"][0]["id"] == run_id


def test_trigger_unknown_is_404(studio: Any) -> None:
    answer = studio.client.post("/api/schedules/000000000000/trigger")
    assert answer.status_code == 404 and answer.json()["field"] == "schedule_id"


def test_trigger_refused_is_409_with_reason_code(
    studio: Any, command_schedule: Callable[..., Any], script: Callable[..., Path], wait: Any
) -> None:
    ok = script("once.sh", "exit 0\n")
    created = _create(studio, command_schedule("once", ok, max_runs=1))
    first = studio.client.post(f"/api/schedules/{created['id']}/trigger")
    assert first.status_code == 202
    wait(_finished(studio, first.json()["run_id"]))
    refused = studio.client.post(f"/api/schedules/{created['id']}/trigger")
    assert refused.status_code == 409, refused.text
    body = refused.json()
    assert set(body) >= {"detail", "reason_code"}
    assert body["reason_code"].startswith("schedule.")
    assert body["detail"]


def test_runs_pagination_status_filter_and_errors(
    studio: Any, command_schedule: Callable[..., Any], script: Callable[..., Path], wait: Any
) -> None:
    ok = script("ok.sh", "exit 0\n")
    bad = script("bad.sh", "echo boom >&2\nexit 3\n")
    good = _create(studio, command_schedule("good", ok, overlap_policy="allow"))
    failing = _create(studio, command_schedule("failing", bad))
    run_ids = []
    for _ in range(3):
        run_id = studio.client.post(f"/api/schedules/{good['id']}/trigger").json()["run_id"]
        wait(_finished(studio, run_id))
        run_ids.append(run_id)
    failed_id = studio.client.post(f"/api/schedules/{failing['id']}/trigger").json()["run_id"]
    failed = wait(_finished(studio, failed_id))
    assert failed["status"] == "failed" and failed["exit_code"] == 3
    assert "boom" in (failed["error_detail"] or "")

    page = studio.client.get(f"/api/schedules/{good['id']}/runs", params={"limit": 2}).json()
    assert page["total"] == 3 and len(page["runs"]) == 2 and page["limit"] == 2
    rest = studio.client.get(
        f"/api/schedules/{good['id']}/runs", params={"limit": 2, "offset": 2}
    ).json()
    assert {r["id"] for r in page["runs"] + rest["runs"]} == set(run_ids)
    done = studio.client.get(
        f"/api/schedules/{good['id']}/runs", params={"status": "completed"}
    ).json()
    assert done["total"] == 3
    none = studio.client.get(f"/api/schedules/{good['id']}/runs", params={"status": "failed"})
    assert none.json()["total"] == 0
    assert studio.client.get("/api/schedules/nope/runs").status_code == 404
    wrong = studio.client.get(f"/api/schedules/{good['id']}/runs", params={"status": "weird"})
    assert wrong.status_code == 422 and wrong.json()["field"] == "status"
    assert (
        studio.client.get(f"/api/schedules/{good['id']}/runs", params={"limit": 0}).status_code
        == 422
    )


def test_run_detail_lists_chain_children(
    studio: Any, command_schedule: Callable[..., Any], script: Callable[..., Path], wait: Any
) -> None:
    ok = script("ok.sh", "exit 0\n")
    follow = script("follow.sh", "exit 0\n")
    created = _create(
        studio,
        command_schedule("chain", ok, on_success={"command": "sh", "command_args": [str(follow)]}),
    )
    run_id = studio.client.post(f"/api/schedules/{created['id']}/trigger").json()["run_id"]

    def with_child() -> dict[str, Any] | None:
        run = _run(studio, run_id)
        if run and run["chain_children"] and run["chain_children"][0]["status"] == "completed":
            return run
        return None

    run = wait(with_child)
    child = run["chain_children"][0]
    assert child["chain_parent_id"] == run_id and child["chain_depth"] == 1
    assert "chain_children" not in child
    assert studio.client.get("/api/schedules/runs/000000000000").status_code == 404
    assert studio.client.get("/api/schedules/runs/000000000000").json()["field"] == "run_id"


# -- preview and limits ----------------------------------------------------------------------


def test_preview(studio: Any, command_schedule: Callable[..., Any]) -> None:
    body = command_schedule("cron", trigger_type="cron", cron_expr="*/15 * * * *")
    body.pop("interval_sec")
    created = _create(studio, body)
    answer = studio.client.get(f"/api/schedules/{created['id']}/preview", params={"n": 3})
    assert answer.status_code == 200, answer.text
    preview = answer.json()
    assert preview["schedule_id"] == created["id"]
    assert preview["timezone"] == studio.settings.timezone
    times = preview["fire_times"]
    assert len(times) == 3
    assert [t["at"] for t in times] == sorted(t["at"] for t in times)
    assert all(int(t["at"]) % 900 == 0 for t in times)
    assert all(t["utc"] and t["local"] for t in times)
    default = studio.client.get(f"/api/schedules/{created['id']}/preview").json()
    assert len(default["fire_times"]) == 5
    assert studio.client.get("/api/schedules/nope/preview").status_code == 404
    for n in (0, 101, "x"):
        bad = studio.client.get(f"/api/schedules/{created['id']}/preview", params={"n": n})
        assert bad.status_code == 422 and bad.json()["field"] == "n"


def test_limits(serve: Callable[..., Any]) -> None:
    studio = serve(max_scheduled_concurrent=3, max_adhoc_concurrent=2)
    answer = studio.client.get("/api/schedules/limits")
    assert answer.status_code == 200
    limits = answer.json()
    assert limits["max_scheduled_concurrent"] == 3
    assert limits["max_adhoc_concurrent"] == 2
    assert limits["in_flight"] == 0 and limits["holders"] == []
