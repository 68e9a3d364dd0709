"""Owners, drift and health verdicts in headless Chromium against a real `studio serve`.

A schedule set is applied through the server's own apply route; a member edited by hand (the
API's PATCH, and the dashboard's edit form) must show as drifted until the set is applied again.
An overdue schedule is a real one: fired by a real engine whose clock stands hours back, on the
server's own database file, then read by the restarted server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import time
from typing import Any

from dashboard_fixtures import Shots, run_to_the_end
from playwright.sync_api import Locator, Page, expect

from studio_api.testing import ServeProcess
from studio_scheduler_core import SchedulerEngine, SchedulerSettings
from studio_state import ManualClock

SET_YAML = """\
apiVersion: studio/v1
kind: ScheduleSet
metadata: {name: team-a}
schedules:
  hourly:
    description: from the file
    trigger: {every: 1h}
    command: {argv: [python3, -c, "pass"]}
  nightly:
    trigger:
      cron: {expression: "0 3 * * *", timezone: Europe/Paris}
    command: {argv: [python3, -c, "pass"]}
"""
DRIFT_TITLE = "edited since the set's last apply; the next apply restores the file's version"
HOUR = 3600.0


def apply_set(server: ServeProcess) -> dict[str, Any]:
    answer = server.request(
        "POST",
        "/api/schedule-sets/apply",
        content=SET_YAML,
        headers={"content-type": "application/yaml"},
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def by_name(server: ServeProcess) -> dict[str, dict[str, Any]]:
    listed = server.request("GET", "/api/schedules?limit=100").json()["schedules"]
    return {str(s["name"]): s for s in listed}


def create(server: ServeProcess, name: str, **fields: object) -> dict[str, Any]:
    body = {
        "name": name,
        "trigger_type": "interval",
        "interval_sec": HOUR,
        "action_kind": "command",
        "action_command": "python3",
        "action_command_args": ["-c", "pass"],
        **fields,
    }
    answer = server.request("POST", "/api/schedules", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def cell(page: Page, name: str, label: str) -> Locator:
    return page.locator(f'tr[data-schedule="{name}"] td[data-label="{label}"]')


def test_owner_and_drift_from_a_hand_edit_until_the_next_apply(
    studio: ServeProcess, page: Page, shots: Shots
) -> None:
    applied = apply_set(studio)
    assert applied["applied"]["created"] == 2
    create(studio, "by-hand")
    rows = by_name(studio)
    hourly, nightly = rows["team-a/hourly"], rows["team-a/nightly"]

    # the list: who owns each schedule; nothing has drifted yet
    page.goto(f"{studio.url}/schedules")
    for name in ("team-a/hourly", "team-a/nightly"):
        owner = cell(page, name, "Owner").locator(".owner")
        expect(owner).to_have_attribute("data-owner", "team-a")
        expect(owner).to_contain_text("set team-a")
    expect(cell(page, "by-hand", "Owner")).to_contain_text("unowned")
    expect(cell(page, "by-hand", "Owner").locator(".owner")).to_have_attribute("data-owner", "")
    expect(page.locator("[data-drifted]")).to_have_count(0)
    expect(page.locator("table.list")).not_to_contain_text("drifted")

    # the schedule's page names its set and member
    page.goto(f"{studio.url}/schedules/{hourly['id']}")
    expect(page.locator("#schedule-owner")).to_contain_text("set team-a")
    expect(page.locator("#schedule-owner")).to_contain_text("member hourly")
    expect(page.locator("[data-drifted]")).to_have_count(0)
    page.goto(f"{studio.url}/schedules/{by_name(studio)['by-hand']['id']}")
    expect(page.locator("#schedule-owner")).to_contain_text("unowned")

    # edited by hand through the API: saved (not refused), and drifted everywhere it shows
    patched = studio.request("PATCH", f"/api/schedules/{hourly['id']}", json={"interval_sec": 600})
    assert patched.status_code == 200, patched.text
    assert patched.json()["drifted"] is True
    page.goto(f"{studio.url}/schedules")
    badge = cell(page, "team-a/hourly", "Owner").locator("[data-drifted]")
    expect(badge).to_have_text(re.compile(r"≠\s*drifted"))
    title = badge.get_attribute("title") or ""
    assert DRIFT_TITLE in title, title
    expect(cell(page, "team-a/nightly", "Owner").locator("[data-drifted]")).to_have_count(0)
    expect(cell(page, "by-hand", "Owner").locator("[data-drifted]")).to_have_count(0)
    box = badge.bounding_box()
    assert box is not None and box["width"] > 20 and box["height"] > 8  # drawn, not just present

    page.goto(f"{studio.url}/schedules/{hourly['id']}")
    expect(page.locator("h1 [data-drifted]")).to_contain_text("drifted")
    expect(page.locator("p[data-warning]")).to_contain_text("the next apply of the set restores")
    shots.take(page, "schedule-drifted")

    # the edit form of a set-owned schedule says who owns it before anything is saved
    page.goto(f"{studio.url}/schedules/{nightly['id']}/edit")
    warning = page.locator("#edit-set-owned")
    expect(warning).to_contain_text("Owned by schedule set team-a")
    expect(warning).to_contain_text("member nightly")
    expect(warning).to_contain_text("the set's next apply restores the file's version")
    shots.take(page, "schedule-edit-set-owned")
    page.get_by_label(re.compile("^Description")).fill("changed in the browser")
    page.get_by_role("button", name="Save changes").click()
    expect(page).to_have_url(re.compile(rf"/schedules/{nightly['id']}\?notice="))
    expect(page.locator("h1 [data-drifted]")).to_be_visible()
    page.goto(f"{studio.url}/schedules/{by_name(studio)['by-hand']['id']}/edit")
    expect(page.get_by_role("button", name="Save changes")).to_be_visible()
    expect(page.locator("#edit-set-owned")).to_have_count(0)

    page.goto(f"{studio.url}/schedules")
    expect(page.locator("tr [data-drifted]")).to_have_count(2)
    shots.take(page, "schedules-owner-drifted")

    # applied again: the file's version is back and nothing is drifted
    again = apply_set(studio)
    assert again["applied"]["updated"] == 2, again
    rows = by_name(studio)
    assert rows["team-a/hourly"]["interval_sec"] == HOUR
    assert rows["team-a/nightly"]["description"] is None
    page.goto(f"{studio.url}/schedules")
    expect(cell(page, "team-a/hourly", "Owner")).to_contain_text("set team-a")
    expect(page.locator("[data-drifted]")).to_have_count(0)
    page.goto(f"{studio.url}/schedules/{hourly['id']}")
    expect(page.locator("[data-drifted]")).to_have_count(0)
    expect(page.locator("p[data-warning]")).to_have_count(0)
    shots.take(page, "schedules-owner-reapplied")


def fire_in_the_past(server: ServeProcess, schedule_id: str, hours_ago: float) -> None:
    """Fire ``schedule_id`` once with a real engine whose clock stands ``hours_ago`` back,
    on the stopped server's database file (a real child process runs it)."""

    async def go() -> None:
        engine = SchedulerEngine(
            str(server.db),
            settings=SchedulerSettings(command_allowlist=("python3",), scheduled_on_any_node=False),
            clock=ManualClock(time.time() - hours_ago * HOUR),
        )
        await engine.start(loop=False)
        try:
            await engine.fire_now(schedule_id)
            await engine.tick_once()
            await engine.wait_idle()
        finally:
            await engine.stop()

    # Playwright's sync API keeps an event loop on this thread: the engine runs on its own
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, go()).result(timeout=120)


def test_every_verdict_is_drawn_with_its_own_glyph_and_word(
    studio: ServeProcess, page: Page, shots: Shots
) -> None:
    quiet = create(studio, "quiet-hourly", max_runs=10)
    steady = create(studio, "steady")
    broken = create(studio, "broken", action_command_args=["-c", "raise SystemExit(3)"])
    create(studio, "fresh")
    off = create(studio, "switched-off")
    assert studio.request("POST", f"/api/schedules/{off['id']}/disable").status_code == 200

    # its only fire was 5 hours ago: silent for longer than max(3 × 1 h, 1 h + 300 s)
    studio.stop()
    fire_in_the_past(studio, quiet["id"], hours_ago=5)
    studio.start()
    assert run_to_the_end(studio, steady["id"])["status"] == "completed"
    assert run_to_the_end(studio, broken["id"])["status"] == "failed"
    verdicts = {name: s["health"] for name, s in by_name(studio).items()}
    assert verdicts == {
        "quiet-hourly": "overdue",
        "steady": "healthy",
        "broken": "failing",
        "fresh": "never_fired",
        "switched-off": "disabled",
    }

    # the list: each verdict by its word and glyph (not colour), and what it means on hover
    page.goto(f"{studio.url}/schedules")
    drawn: dict[str, str] = {}
    for name, verdict in verdicts.items():
        badge = cell(page, name, "Health").locator("[data-status]")
        expect(badge).to_have_attribute("data-status", verdict)
        drawn[verdict] = " ".join(badge.inner_text().split())
        assert (badge.get_attribute("title") or "") != "", name
    assert drawn == {
        "overdue": "◷ overdue",
        "healthy": "✓ healthy",
        "failing": "✗ failing",
        "never_fired": "– never fired",
        "disabled": "○ disabled",
    }
    assert len({text.split()[0] for text in drawn.values()}) == 5  # five different glyphs
    overdue_badge = cell(page, "quiet-hourly", "Health").locator("[data-status]")
    assert "no fire" in (overdue_badge.get_attribute("title") or "")
    # its last run is the one fired hours ago, and it completed
    expect(cell(page, "quiet-hourly", "Last run").locator("[data-status]")).to_have_attribute(
        "data-status", "completed"
    )
    shots.take(page, "schedules-every-verdict")

    # the overview's summary: one of each verdict, overdue among them, in words and glyphs
    page.goto(f"{studio.url}/")
    summary = page.locator("#health-summary li")
    counts = {
        summary.nth(i).get_attribute("data-verdict"): summary.nth(i).get_attribute("data-count")
        for i in range(summary.count())
    }
    assert counts == dict.fromkeys(verdicts.values(), "1")
    overdue_item = page.locator('#health-summary li[data-verdict="overdue"]')
    expect(overdue_item).to_have_text(re.compile(r"◷\s*overdue\s*1"))
    expect(page.locator('#health-summary li[data-verdict="failing"]')).to_have_text(
        re.compile(r"✗\s*failing\s*1")
    )
    shots.take(page, "overview-every-verdict")

    # the overdue schedule's page: every figure an on-call operator asks for
    page.goto(f"{studio.url}/schedules/{quiet['id']}")
    health = page.locator("#schedule-health")
    expect(health.locator("[data-status]").first).to_have_attribute("data-status", "overdue")
    for label in (
        "Health",
        "Last run",
        "Failures in a row",
        "Next fire",
        "Success, 7 days",
        "Duration p50 / p95, 7 days",
        "Runs left",
        "Spend",
    ):
        expect(health.locator(".label", has_text=label)).to_have_count(1)
    expect(health).to_contain_text("overdue")
    stored = studio.request("GET", f"/api/schedules/{quiet['id']}").json()
    expect(page.locator("#health-next-fire time")).to_have_attribute(
        "datetime",
        time.strftime("%Y-%m-%dT%H:%M:%SZ UTC", time.gmtime(stored["next_fire_at"])),
    )
    expect(page.locator("#health-remaining")).to_contain_text("9")
    expect(health).to_contain_text("100%")
    last_run = health.locator(".cell", has_text="Last run")
    expect(last_run.locator("[data-status]")).to_have_attribute("data-status", "completed")
    fired_at = last_run.locator("time").get_attribute("datetime") or ""
    assert fired_at == time.strftime(
        "%Y-%m-%dT%H:%M:%SZ UTC", time.gmtime(stored["last_run_at"])
    ), fired_at
    assert time.time() - stored["last_run_at"] > 4.9 * HOUR
    shots.take(page, "schedule-overdue")

    # a failing schedule's page counts its streak
    page.goto(f"{studio.url}/schedules/{broken['id']}")
    expect(page.locator("#schedule-health [data-status]").first).to_have_attribute(
        "data-status", "failing"
    )
    expect(page.locator("#schedule-health .cell", has_text="Failures in a row")).to_contain_text(
        "1"
    )
    expect(page.locator("#health-remaining")).to_contain_text("no limit")


def test_an_at_trigger_and_a_rate_limit_are_shown(studio: ServeProcess, page: Page) -> None:
    once = create(
        studio, "once", trigger_type="at", interval_sec=None, at="2030-01-05T09:00:00+01:00"
    )
    limited = create(studio, "limited", rate_limit={"max_fires": 3, "window_sec": "1h"})
    page.goto(f"{studio.url}/schedules")
    expect(cell(page, "once", "Trigger")).to_contain_text("at 2030-01-05T09:00:00+01:00")
    page.locator('form.filters select[name="trigger_type"]').select_option("at")
    page.locator("form.filters").get_by_role("button", name="Filter").click()
    expect(page.locator("tr[data-schedule]")).to_have_count(1)
    expect(page.locator('tr[data-schedule="once"]')).to_be_visible()
    page.goto(f"{studio.url}/schedules/{once['id']}")
    expect(page.locator("dl.settings")).to_contain_text("at 2030-01-05T09:00:00+01:00")
    page.goto(f"{studio.url}/schedules/{limited['id']}")
    expect(page.locator("dl.settings")).to_contain_text("at most 3 fires in any 1 h 00 min")
