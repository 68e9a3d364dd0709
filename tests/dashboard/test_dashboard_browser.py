"""The dashboard in headless Chromium against a real `studio serve` (fake li, real SQLite)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from pathlib import Path

import httpx
from conftest import db_rows, wait_for
from dashboard_fixtures import Recorded, Shots, api_routes, start_studio
from playwright.sync_api import Page, expect

import studio_outbox
from studio_api.testing import ServeProcess
from studio_state import connect

LOG_STREAM = "/api/schedules/runs/{run_id}/log/stream"
CANCEL = "/api/schedules/runs/{run_id}/cancel"


def create(server: ServeProcess, name: str, **action: object) -> dict[str, object]:
    body = {"name": name, "trigger_type": "interval", "interval_sec": 3600, **action}
    answer = server.request("POST", "/api/schedules", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def row(page: Page, name: str):  # type: ignore[no-untyped-def]
    return page.locator(f'tr[data-schedule="{name}"]')


def test_schedules_runs_and_actions_from_the_pages(
    studio: ServeProcess, page: Page, shots: Shots, recorded: Recorded
) -> None:
    url = studio.url
    report = create(
        studio,
        "nightly-report",
        action_kind="command",
        action_command="python3",
        action_command_args=["-c", "import time; print('report written'); time.sleep(4)"],
        description="writes the nightly report",
    )
    failing = create(
        studio, "flaky-agent", action_kind="agent", action_prompt="exit=3 stderr=boom-from-li"
    )

    page.goto(f"{url}/")
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    expect(page.locator(".health")).to_contain_text("Scheduler")

    # the list shows the schedule made through the API; its name links to its page
    page.get_by_role("link", name="Schedules", exact=True).click()
    expect(row(page, "nightly-report")).to_contain_text("enabled")
    shots.take(page, "02-schedules")

    # Trigger from the list: the notice links the new run; the overview shows it in flight
    row(page, "nightly-report").get_by_role("button", name="Trigger").click()
    notice = page.locator(".flash-notice")
    expect(notice).to_contain_text(f"Schedule {report['id']} triggered")
    run_id = notice.get_by_role("link").inner_text()
    assert re.fullmatch(r"[0-9a-f]{12}", run_id)
    page.get_by_role("link", name="Studio").click()
    in_flight = page.locator("section", has=page.get_by_role("heading", name="In flight"))
    expect(in_flight.locator(f'a[href="/runs/{run_id}"]')).to_be_visible()
    expect(in_flight).to_contain_text("running")
    shots.take(page, "01-overview-in-flight")

    # the run page turns from running to completed by itself: no reload (the marker stays)
    in_flight.get_by_role("link", name=run_id).click()
    expect(page).to_have_url(f"{url}/runs/{run_id}")
    page.evaluate("window.__notReloaded = true")
    expect(page.locator("#live-run [data-status]").first).to_have_attribute(
        "data-status", "completed"
    )
    assert page.evaluate("window.__notReloaded === true")
    expect(page.locator("#live-run")).to_contain_text("nightly-report")
    routes = api_routes(studio)
    assert LOG_STREAM in routes and CANCEL in routes
    expect(page.locator("#run-log")).to_contain_text("report written")
    shots.take(page, "04-run-completed")

    # the schedule page: settings, next 10 fires in its zone (UTC on hover), its runs
    page.get_by_role("link", name="nightly-report").click()
    expect(page.get_by_role("heading", name="nightly-report")).to_be_visible()
    expect(page.locator("ol.fires li")).to_have_count(10)
    first_fire = page.locator("ol.fires time").first
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d E[SD]T", first_fire.inner_text())
    utc = first_fire.get_attribute("title") or ""
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ UTC", utc)
    expect(page.locator("#live-runs")).to_contain_text(run_id)
    expect(page.locator(".settings")).to_contain_text("writes the nightly report")
    shots.take(page, "03-schedule")

    # a failing agent run: its page shows the reason and the stderr tail
    page.goto(f"{url}/schedules/{failing['id']}")
    page.get_by_role("button", name="Trigger").click()
    page.locator(".flash-notice").get_by_role("link").click()
    expect(page.locator("#live-run [data-status]").first).to_have_attribute("data-status", "failed")
    expect(page.locator("#stderr-tail")).to_contain_text("boom-from-li")
    shots.take(page, "05-run-failed")

    # Cancel a long run from its page
    sleeper = create(
        studio,
        "long-sleeper",
        action_kind="command",
        action_command="python3",
        action_command_args=["-c", "import time; time.sleep(120)"],
    )
    page.goto(f"{url}/schedules/{sleeper['id']}")
    page.get_by_role("button", name="Trigger").click()
    page.locator(".flash-notice").get_by_role("link").click()
    status = page.locator("#live-run [data-status]").first
    expect(status).to_have_attribute("data-status", "running")
    page.get_by_role("button", name="Cancel").click()
    expect(status).to_have_attribute("data-status", "cancelled")

    # the overview lists the failure, with its run linked
    page.get_by_role("link", name="Studio").click()
    failures = page.locator("section", has=page.get_by_role("heading", name="Recent failures"))
    expect(failures).to_contain_text("flaky-agent")
    expect(failures.get_by_role("link", name=re.compile("^[0-9a-f]{12}$")).first).to_be_visible()
    shots.take(page, "01-overview-failures")
    page.get_by_role("link", name="Runs", exact=True).click()
    expect(page.locator("#live-runs")).to_contain_text(run_id)
    shots.take(page, "06-runs")

    # Disable, Enable, Delete from the list, each checked through the API
    page.goto(f"{url}/schedules")
    row(page, "nightly-report").get_by_role("button", name="Disable").click()
    expect(row(page, "nightly-report")).to_contain_text("disabled")
    assert studio.request("GET", f"/api/schedules/{report['id']}").json()["enabled"] is False
    row(page, "nightly-report").get_by_role("button", name="Enable").click()
    expect(row(page, "nightly-report")).to_contain_text("enabled")
    assert studio.request("GET", f"/api/schedules/{report['id']}").json()["enabled"] is True
    row(page, "flaky-agent").get_by_role("button", name="Delete").click()
    expect(page.get_by_role("heading", name="Delete schedule flaky-agent?")).to_be_visible()
    shots.take(page, "03-schedule-delete-confirm")
    page.get_by_role("button", name="Delete", exact=True).click()
    expect(page.locator(".flash-notice")).to_contain_text("Schedule flaky-agent deleted")
    expect(row(page, "flaky-agent")).to_have_count(0)
    assert studio.request("GET", f"/api/schedules/{failing['id']}").status_code == 404

    # a POST without the CSRF token is refused and changes nothing
    refused = page.request.post(
        f"{url}/schedules/{report['id']}/disable", form={"back": "/schedules"}
    )
    assert refused.status == 403
    assert studio.request("GET", f"/api/schedules/{report['id']}").json()["enabled"] is True

    # a narrow window: the list still reads (cells stacked, each labelled)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{url}/schedules")
    expect(row(page, "nightly-report").get_by_role("button", name="Trigger")).to_be_visible()
    shots.take(page, "07-schedules-narrow")


async def _enqueue(db: Path) -> dict[str, str]:
    async with connect(db) as conn:
        return {
            "dead": await studio_outbox.enqueue_dispatch(
                conn, kind="alert", deliver_to="fail:ops", body={"msg": "disk full"}, max_attempts=1
            ),
            "ack": await studio_outbox.enqueue_dispatch(
                conn, kind="report", deliver_to="ok:ops", body={"msg": "done"}, ack_required=True
            ),
        }


def test_dispatch_retry_ack_purge_from_the_page(
    studio: ServeProcess, page: Page, shots: Shots
) -> None:
    # Playwright's sync API runs an event loop in this thread: produce from another one
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        ids = pool.submit(asyncio.run, _enqueue(studio.db)).result()

    def column(key: str, name: str) -> str:
        sql = f"SELECT {name} FROM dispatch_outbox WHERE id = ?"
        return str(db_rows(studio.db, sql, (ids[key],))[0][name])

    def status(key: str) -> str:
        return column(key, "status")

    wait_for(lambda: status("dead") == "dead_letter", what="the failing row is dead-lettered")
    # an ack-required row is sent, then waits (pending, re-sent later) for its ack
    wait_for(lambda: column("ack", "attempt") == "1", what="the ack row was sent once")
    token = column("ack", "ack_token")  # what the receiver got with the delivery

    page.goto(f"{studio.url}/")
    page.get_by_role("link", name="Dispatch", exact=True).click()
    dead = page.locator(f'tr[data-dispatch="{ids["dead"]}"]')
    expect(dead).to_contain_text("dead letter")
    dead.get_by_text("show").click()
    expect(dead.locator("pre.payload")).to_contain_text("disk full")
    assert token not in page.content()  # payloads never show the ack token
    shots.take(page, "08-dispatch")

    # filter by status, then Retry: a new attempt is made (and dead-letters again)
    page.get_by_label("Status").select_option("dead_letter")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("tr[data-dispatch]")).to_have_count(1)
    page.get_by_role("button", name="Retry").click()
    expect(page.locator(".flash-notice")).to_contain_text("queued for retry")
    dead_letters = "SELECT 1 FROM status_transitions WHERE entity_id = ? AND status = ?"
    wait_for(
        lambda: len(db_rows(studio.db, dead_letters, (ids["dead"], "dead_letter"))) == 2,
        what="the retried row was delivered again",
    )

    # Ack is an operator's ack: no token to type (the page never shows the receiver's)
    page.goto(f"{studio.url}/dispatch?kind=report")
    acked = page.locator(f'tr[data-dispatch="{ids["ack"]}"]')
    acked.get_by_role("button", name="Ack").click()
    expect(page.locator(".flash-notice")).to_contain_text("acknowledged")
    expect(acked).to_contain_text("acked")
    assert status("ack") == "acked"

    # Purge removes the row
    acked.get_by_role("button", name="Purge").click()
    expect(page.locator(".flash-notice")).to_contain_text("purged")
    expect(acked).to_have_count(0)
    assert studio.request("GET", f"/api/dispatch/{ids['ack']}").status_code == 404


def test_login_logout_and_csrf_with_a_token(tmp_path: Path, page: Page, shots: Shots) -> None:
    token = "s3cret-dashboard-token"
    studio = start_studio(tmp_path / "guarded", LIONAGI_STUDIO_AUTH_TOKEN=token)
    try:
        url = studio.url
        # the API keeps answering 401 without the bearer token, cookie or not
        assert httpx.get(f"{url}/api/schedules").status_code == 401
        page.goto(f"{url}/schedules")
        expect(page).to_have_url(re.compile(r"/login\?next=%2Fschedules$"))
        expect(page.get_by_role("button", name="Log out")).to_have_count(0)
        shots.take(page, "09-login")
        page.get_by_label(re.compile("Studio token")).fill("not-the-token")
        page.get_by_role("button", name="Log in").click()
        expect(page.locator(".flash-error")).to_contain_text("wrong token")

        page.get_by_label(re.compile("Studio token")).fill(token)
        page.get_by_role("button", name="Log in").click()
        expect(page).to_have_url(f"{url}/schedules")
        cookie = next(c for c in page.context.cookies() if c["name"] == "studio_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["expires"] > 0
        assert token not in cookie["value"]
        # logged in, the pages work; the API still wants its bearer token
        assert page.request.get(f"{url}/api/schedules").status == 401
        assert page.request.post(f"{url}/logout", form={}).status == 403  # no CSRF token

        page.get_by_role("button", name="Log out").click()
        expect(page).to_have_url(f"{url}/login")
        page.goto(f"{url}/")
        expect(page).to_have_url(re.compile(r"/login"))
        # a forged cookie is no session
        page.context.add_cookies([{**cookie, "value": cookie["value"][:-4] + "0000"}])
        page.goto(f"{url}/dispatch")
        expect(page).to_have_url(re.compile(r"/login"))
    finally:
        studio.close()
        studio.stop()
