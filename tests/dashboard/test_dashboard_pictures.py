"""The dashboard's pictures and the edit form in headless Chromium against a real `studio serve`.

The runs are real: a command schedule whose child process fails every third run and sleeps a
little longer each time, triggered through the API; the strip on its page must show exactly
those runs (count, order, link targets, statuses) on a stated scale.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from dashboard_fixtures import Shots, run_to_the_end
from playwright.sync_api import Page, expect

from studio_api.testing import ServeProcess

#: Fails on every third run (n = 2, 5, ...), sleeps 0.25 s more each run; n counts in a file.
COUNTER = (
    "import os, sys, time\n"
    "p = sys.argv[1]\n"
    "n = int(open(p).read()) if os.path.exists(p) else 0\n"
    "open(p, 'w').write(str(n + 1))\n"
    "time.sleep(0.25 * n)\n"
    "sys.exit(1 if n % 3 == 2 else 0)\n"
)


def create(server: ServeProcess, name: str, **fields: object) -> dict[str, Any]:
    body = {"name": name, "trigger_type": "interval", "interval_sec": 3600, **fields}
    answer = server.request("POST", "/api/schedules", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def counting_schedule(server: ServeProcess, tmp_path: Path, runs: int) -> dict[str, Any]:
    made = create(
        server,
        "counted-report",
        action_kind="command",
        action_command="python3",
        action_command_args=["-c", COUNTER, str(tmp_path / "count")],
    )
    for _ in range(runs):
        run_to_the_end(server, made["id"])
    return made


def test_run_strip_matches_the_runs_and_links_to_them(
    studio: ServeProcess, page: Page, shots: Shots, tmp_path: Path
) -> None:
    made = counting_schedule(studio, tmp_path, runs=7)
    listed = studio.request("GET", f"/api/schedules/{made['id']}/runs?limit=50").json()["runs"]
    assert len(listed) == 7

    page.goto(f"{studio.url}/schedules/{made['id']}")
    bars = page.locator("#run-strip svg a.bar-link")
    expect(bars).to_have_count(7)
    # oldest on the left: the API's newest-first list, reversed
    oldest_first = listed[::-1]
    assert [bars.nth(i).get_attribute("data-run") for i in range(7)] == [
        r["id"] for r in oldest_first
    ]
    assert [bars.nth(i).get_attribute("href") for i in range(7)] == [
        f"/runs/{r['id']}" for r in oldest_first
    ]
    statuses = [bars.nth(i).get_attribute("data-status") for i in range(7)]
    assert statuses == [r["status"] for r in oldest_first]
    assert statuses == [
        "completed",
        "completed",
        "failed",
        "completed",
        "completed",
        "failed",
        "completed",
    ]
    # status also by glyph, and the hover title carries the times
    glyphs = page.locator("#run-strip svg text.glyph").all_text_contents()
    assert glyphs == ["✗" if s == "failed" else "✓" for s in statuses]
    title = bars.nth(2).locator("title").text_content() or ""
    assert re.search(r"failed · started \d{4}-\d\d-\d\dT[\d:]+Z UTC · ended .* · took ", title)
    # bar height is duration on the stated scale: the longest run (the last) is the tallest
    heights = [
        float(h)
        for h in page.locator("#run-strip rect.bar").evaluate_all(
            "(rs) => rs.map((r) => r.getAttribute('height'))"
        )
    ]
    assert max(heights) == heights[-1]
    scale = page.locator("#strip-scale").inner_text()
    longest = max(r["ended_at"] - r["fired_at"] for r in listed)
    assert scale.startswith("tallest bar = ") and scale.endswith(" s"), scale
    assert abs(float(scale.split("= ")[1].split()[0]) - longest) < 0.06, (scale, longest)
    # drawn, not just present: the strip has a real size in the page
    box = page.locator("#run-strip svg").bounding_box()
    assert box is not None and box["width"] > 600 and box["height"] > 60
    shots.take(page, "schedule-run-strip")

    # a failed bar leads to its run: the command that ran and why it failed
    bars.nth(2).click()
    failed = oldest_first[2]
    expect(page).to_have_url(f"{studio.url}/runs/{failed['id']}")
    expect(page.locator("#live-run [data-status]").first).to_have_attribute("data-status", "failed")
    words = page.locator("#run-argv code").all_inner_texts()
    assert words[0].endswith("python3") and words[1] == "-c", words
    assert failed["error_class"] == "nonzero_exit"
    expect(page.locator("#run-error-class")).to_have_text("nonzero_exit")
    shots.take(page, "run-failed-command")


def test_edit_a_schedule_from_its_page(studio: ServeProcess, page: Page, shots: Shots) -> None:
    made = create(
        studio, "editable", action_kind="command", action_command="python3", description="before"
    )
    page.goto(f"{studio.url}/schedules/{made['id']}")
    page.locator("#edit-link").click()
    expect(page).to_have_url(f"{studio.url}/schedules/{made['id']}/edit")
    interval = page.get_by_label("Interval, seconds")
    expect(interval).to_have_value("3600")
    expect(page.get_by_label(re.compile("^Description"))).to_have_value("before")

    # refused: the API's message beside the field it names, what was typed kept, nothing saved
    interval.fill("often")
    page.get_by_label(re.compile("^Description")).fill("after")
    page.get_by_role("button", name="Save changes").click()
    error = page.locator("#error-interval_sec")
    expect(error).to_contain_text("interval_sec")
    expect(interval).to_have_attribute("aria-invalid", "true")
    expect(interval).to_have_value("often")
    expect(page.get_by_label(re.compile("^Description"))).to_have_value("after")
    stored = studio.request("GET", f"/api/schedules/{made['id']}").json()
    assert stored["interval_sec"] == 3600 and stored["description"] == "before"
    shots.take(page, "schedule-edit-refused")

    # saved: only what changed is sent; a blank optional field is cleared
    interval.fill("120")
    page.get_by_label(re.compile("^Description")).fill("")
    page.get_by_label(re.compile("^Budget, USD")).fill("2.5")
    page.get_by_role("button", name="Save changes").click()
    expect(page).to_have_url(re.compile(rf"/schedules/{made['id']}\?notice="))
    expect(page.locator(".flash-notice")).to_contain_text(
        "Schedule saved (budget_usd, description, interval_sec)"
    )
    stored = studio.request("GET", f"/api/schedules/{made['id']}").json()
    assert stored["interval_sec"] == 120
    assert stored["description"] is None
    assert stored["budget_usd"] == 2.5
    assert stored["action_command"] == "python3"
    shots.take(page, "schedule-edited")

    # the form's CSRF token is checked: a post without it changes nothing
    refused = page.request.post(
        f"{studio.url}/schedules/{made['id']}/edit", form={"name": "hijacked"}
    )
    assert refused.status == 403 and "csrf" in refused.text()
    assert studio.request("GET", f"/api/schedules/{made['id']}").json()["name"] == "editable"


def test_overview_activity_health_and_the_list(
    studio: ServeProcess, page: Page, shots: Shots, tmp_path: Path
) -> None:
    counted = counting_schedule(studio, tmp_path, runs=4)  # completed, completed, failed, completed
    failing = create(studio, "flaky-agent", action_kind="agent", action_prompt="exit=3 stderr=boom")
    failed_run = run_to_the_end(studio, failing["id"])
    assert failed_run["status"] == "failed"
    create(studio, "fresh", action_kind="agent", action_prompt="hello")
    quiet = create(studio, "switched-off", action_kind="agent", action_prompt="hello")
    assert studio.request("POST", f"/api/schedules/{quiet['id']}/disable").status_code == 200

    page.goto(f"{studio.url}/")
    # the health summary counts each verdict (every verdict listed, zeros too)
    summary = page.locator("#health-summary li")
    counts = {
        summary.nth(i).get_attribute("data-verdict"): summary.nth(i).get_attribute("data-count")
        for i in range(summary.count())
    }
    assert counts == {
        "disabled": "1",
        "never_fired": "1",
        "healthy": "1",
        "failing": "1",
        "overdue": "0",
    }
    expect(page.locator("#health-summary")).to_contain_text("never fired")

    # the activity chart: 24 hourly columns, the 5 runs that ended in the newest (or the two
    # newest, when the runs straddled an hour), stacked completed under failed
    columns = page.locator("#activity-chart svg g.column")
    expect(columns).to_have_count(24)
    totals = [int(columns.nth(i).get_attribute("data-total") or "") for i in range(24)]
    assert sum(totals) == 5 and sum(totals[:22]) == 0, totals
    stacked: dict[str, int] = {}
    for i in (22, 23):
        segments = columns.nth(i).locator("rect.seg")
        series = [
            segments.nth(j).get_attribute("data-series") or "" for j in range(segments.count())
        ]
        assert series in ([], ["completed"], ["failed"], ["completed", "failed"]), series
        for j, name in enumerate(series):
            stacked[name] = stacked.get(name, 0) + int(
                segments.nth(j).get_attribute("data-count") or ""
            )
    assert stacked == {"completed": 3, "failed": 2}
    expect(page.locator("#activity-scale")).to_have_text(f"tallest column = {max(totals)} runs")
    expect(page.locator("#completion-rate")).to_contain_text("60%")
    box = page.locator("#activity-chart svg.activity-svg").bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 40
    shots.take(page, "overview-activity-health")

    # the list: a health badge and the last run's status (linked to it) on each row
    page.goto(f"{studio.url}/schedules")

    def cell(name: str, label: str):  # type: ignore[no-untyped-def]
        return page.locator(f'tr[data-schedule="{name}"] td[data-label="{label}"]')

    expect(cell("counted-report", "Health").locator("[data-status]")).to_have_attribute(
        "data-status", "healthy"
    )
    expect(cell("flaky-agent", "Health").locator("[data-status]")).to_have_attribute(
        "data-status", "failing"
    )
    expect(cell("fresh", "Health")).to_contain_text("never fired")
    expect(cell("switched-off", "Health")).to_contain_text("disabled")
    expect(cell("flaky-agent", "Last run").locator("a")).to_have_attribute(
        "href", f"/runs/{failed_run['id']}"
    )
    expect(cell("flaky-agent", "Last run").locator("[data-status]")).to_have_attribute(
        "data-status", "failed"
    )
    expect(cell("counted-report", "Last run").locator("[data-status]")).to_have_attribute(
        "data-status", "completed"
    )
    expect(cell("fresh", "Last run")).to_contain_text("none yet")
    shots.take(page, "schedules-health")

    # the schedule's page says the same, with its streak and 7-day rate
    page.goto(f"{studio.url}/schedules/{counted['id']}")
    expect(page.locator("#schedule-health")).to_contain_text("healthy")
    expect(page.locator("#schedule-health")).to_contain_text("75%")
