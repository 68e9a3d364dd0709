"""The create-schedule form and Delete / force-delete, in headless Chromium on a real server."""

from __future__ import annotations

from conftest import pid_alive, wait_for
from dashboard_fixtures import Shots
from playwright.sync_api import Page, expect

from studio_api.testing import ServeProcess

ARGS = "-c\nimport time; print('made from the page'); time.sleep(1)"


def open_form(page: Page, url: str) -> None:
    page.goto(f"{url}/schedules")
    form = page.locator("details#new-schedule")
    if form.get_attribute("open") is None:
        form.locator("summary").click()
    expect(page.get_by_role("button", name="Create schedule")).to_be_visible()


def test_create_a_schedule_from_the_page(studio: ServeProcess, page: Page, shots: Shots) -> None:
    url = studio.url
    open_form(page, url)
    # with no schedule yet the form is open on arrival (the quickstart starts here)
    shots.take(page, "10-schedules-create-form")
    page.set_viewport_size({"width": 390, "height": 844})
    expect(page.get_by_role("button", name="Create schedule")).to_be_visible()
    shots.take(page, "10-schedules-create-form-narrow")
    page.set_viewport_size({"width": 1280, "height": 800})

    # an invalid cron expression: the API's own message, beside its field, values kept
    page.get_by_label("Name", exact=True).fill("from-the-page")
    page.get_by_label("Type").select_option("cron")
    expect(page.get_by_label("Interval, seconds")).to_be_hidden()
    page.get_by_label("Cron expression", exact=True).fill("61 * * * *")
    page.get_by_label("Time zone").fill("Europe/Paris")
    page.get_by_label("Command", exact=True).fill("python3")
    page.get_by_label("Arguments").fill(ARGS)
    page.get_by_label("Timeout, seconds").fill("600")
    page.get_by_role("button", name="Create schedule").click()

    api_body = {
        "name": "from-the-page",
        "trigger_type": "cron",
        "cron_expr": "61 * * * *",
        "action_kind": "command",
        "action_command": "python3",
    }
    refusal = studio.request("POST", "/api/schedules", json=api_body)
    assert refusal.status_code == 422 and refusal.json()["field"] == "cron_expr"
    detail = refusal.json()["detail"]
    expect(page.locator("#create-error")).to_contain_text(detail)
    expect(page.locator("#error-cron_expr")).to_contain_text("cron_expr")
    cron = page.get_by_label("Cron expression", exact=True)
    expect(cron).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Name", exact=True)).to_have_value("from-the-page")
    expect(page.get_by_label("Cron expression", exact=True)).to_have_value("61 * * * *")
    expect(page.get_by_label("Arguments")).to_have_value(ARGS)
    expect(page.get_by_label("Time zone")).to_have_value("Europe/Paris")
    expect(page.get_by_label("Timeout, seconds")).to_have_value("600")
    assert studio.request("GET", "/api/schedules").json()["total"] == 0  # nothing written
    shots.take(page, "11-schedules-create-refused")

    # a bad interval is refused by the API's model, naming interval_sec
    page.get_by_label("Type").select_option("interval")
    page.get_by_label("Interval, seconds").fill("every hour")
    page.get_by_role("button", name="Create schedule").click()
    expect(page.locator("#error-interval_sec")).to_contain_text("interval_sec")
    expect(page.get_by_label("Interval, seconds")).to_have_value("every hour")

    # corrected: created, listed, with exactly what was typed (arguments one per line)
    page.get_by_label("Interval, seconds").fill("90")
    page.get_by_role("checkbox", name="Enabled").uncheck()
    page.get_by_role("button", name="Create schedule").click()
    expect(page.locator(".flash-notice")).to_contain_text("Schedule from-the-page created")
    listed = page.locator('tr[data-schedule="from-the-page"]')
    expect(listed).to_contain_text("interval")
    expect(listed).to_contain_text("disabled")
    made = studio.request("GET", "/api/schedules").json()["schedules"]
    assert len(made) == 1
    schedule = made[0]
    assert schedule["trigger_type"] == "interval" and schedule["interval_sec"] == 90
    assert schedule["cron_expr"] is None
    assert schedule["timezone"] == "Europe/Paris" and schedule["timeout_sec"] == 600
    assert schedule["action_command"] == "python3"
    assert schedule["action_command_args"] == ARGS.split("\n")
    assert schedule["enabled"] is False

    # the name is taken now: 409 from the API, shown by the name field
    open_form(page, url)
    page.get_by_label("Name", exact=True).fill("from-the-page")
    page.get_by_label("Interval, seconds").fill("60")
    page.get_by_label("Command", exact=True).fill("python3")
    page.get_by_role("button", name="Create schedule").click()
    expect(page.locator("#error-name")).to_contain_text("from-the-page")
    assert studio.request("GET", "/api/schedules").json()["total"] == 1

    # the schedule made on the page runs: Enable and Trigger it, its run completes
    listed.get_by_role("button", name="Enable").click()
    expect(listed).to_contain_text("enabled")
    listed.get_by_role("button", name="Trigger").click()
    page.locator(".flash-notice").get_by_role("link").click()
    expect(page.locator("#live-run [data-status]").first).to_have_attribute(
        "data-status", "completed"
    )
    expect(page.locator("#run-log")).to_contain_text("made from the page")

    # the form without its CSRF token is refused and writes nothing
    refused = page.request.post(
        f"{url}/schedules",
        form={
            "name": "forged",
            "trigger_type": "interval",
            "interval_sec": "60",
            "action_kind": "command",
            "action_command": "true",
        },
    )
    assert refused.status == 403
    assert studio.request("GET", "/api/schedules").json()["total"] == 1


def test_delete_is_refused_while_running_then_force_deletes(
    studio: ServeProcess, page: Page, shots: Shots
) -> None:
    url = studio.url
    body = {
        "name": "long-runner",
        "trigger_type": "interval",
        "interval_sec": 3600,
        "action_kind": "command",
        "action_command": "python3",
        "action_command_args": ["-c", "import time; time.sleep(300)"],
    }
    created = studio.request("POST", "/api/schedules", json=body).json()
    sid = created["id"]
    run_id = studio.request("POST", f"/api/schedules/{sid}/trigger").json()["run_id"]

    def run() -> dict[str, object]:
        return dict(studio.request("GET", f"/api/schedules/runs/{run_id}").json())

    wait_for(lambda: run().get("child_pid"), what="the long run has its child")
    pid = int(str(run()["child_pid"]))

    # Delete from the schedule's page: a confirm step first, nothing deleted yet
    page.goto(f"{url}/schedules/{sid}")
    page.get_by_role("button", name="Delete", exact=True).click()
    expect(page.get_by_role("heading", name="Delete schedule long-runner?")).to_be_visible()
    expect(page.locator("#running-now")).to_contain_text("1 running")
    expect(page.get_by_role("button", name="Cancel runs and delete")).to_have_count(0)
    assert studio.request("GET", f"/api/schedules/{sid}").status_code == 200

    # a plain delete: the API's 409, inline, and the force option offered
    page.get_by_role("button", name="Delete", exact=True).click()
    api = studio.request("DELETE", f"/api/schedules/{sid}")
    assert api.status_code == 409 and api.json()["reason_code"] == "schedule.delete.running"
    expect(page.locator("#delete-refused")).to_contain_text(api.json()["detail"])
    force = page.get_by_role("button", name="Cancel runs and delete")
    expect(force).to_be_visible()
    assert studio.request("GET", f"/api/schedules/{sid}").status_code == 200
    assert run()["status"] == "running" and pid_alive(pid)
    shots.take(page, "12-delete-refused-409")
    page.set_viewport_size({"width": 390, "height": 844})
    expect(force).to_be_visible()
    shots.take(page, "12-delete-refused-409-narrow")
    page.set_viewport_size({"width": 1280, "height": 800})

    # force: the run is cancelled (run.cancelled.operator), its process gone, the schedule gone
    force.click()
    expect(page.locator(".flash-notice")).to_contain_text("its running runs were cancelled")
    expect(page.locator('tr[data-schedule="long-runner"]')).to_have_count(0)
    assert studio.request("GET", f"/api/schedules/{sid}").status_code == 404
    assert studio.request("GET", f"/api/schedules/runs/{run_id}").status_code == 404
    cancelled = studio.rows(
        "SELECT previous_status, reason_code FROM status_transitions "
        "WHERE entity_id = ? AND status = 'cancelled'",
        (run_id,),
    )
    assert cancelled == [{"previous_status": "running", "reason_code": "run.cancelled.operator"}]
    wait_for(lambda: not pid_alive(pid), what="the cancelled run's process is gone")


def test_delete_an_idle_schedule_and_keep_it(studio: ServeProcess, page: Page) -> None:
    url = studio.url
    body = {
        "name": "idle",
        "trigger_type": "interval",
        "interval_sec": 3600,
        "action_kind": "command",
        "action_command": "python3",
        "action_command_args": ["-c", "pass"],
    }
    sid = studio.request("POST", "/api/schedules", json=body).json()["id"]
    page.goto(f"{url}/schedules?enabled=true")
    row = page.locator('tr[data-schedule="idle"]')

    # Keep it: back to the list as it was, nothing deleted
    row.get_by_role("button", name="Delete", exact=True).click()
    page.get_by_role("link", name="Keep it").click()
    expect(page).to_have_url(f"{url}/schedules?enabled=true")
    assert studio.request("GET", f"/api/schedules/{sid}").status_code == 200

    # Delete: back to the same filtered list, the row gone
    row.get_by_role("button", name="Delete", exact=True).click()
    page.get_by_role("button", name="Delete", exact=True).click()
    expect(page.locator(".flash-notice")).to_contain_text("Schedule idle deleted")
    assert page.url.startswith(f"{url}/schedules?enabled=true")
    expect(row).to_have_count(0)
    assert studio.request("GET", f"/api/schedules/{sid}").status_code == 404

    # a forged confirm (no CSRF token) deletes nothing
    sid = studio.request("POST", "/api/schedules", json={**body, "name": "kept"}).json()["id"]
    assert page.request.post(f"{url}/schedules/{sid}/force-delete", form={}).status == 403
    assert studio.request("GET", f"/api/schedules/{sid}").status_code == 200
