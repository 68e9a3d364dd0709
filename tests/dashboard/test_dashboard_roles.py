"""The dashboard with scoped tokens (real Chromium, real `studio serve`): the login takes any
token, hides what its role may not use, the server still refuses it, the operator's Ack, and
the Audit page."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import time
from pathlib import Path
from typing import Any

from conftest import db_rows, wait_for
from dashboard_fixtures import Shots, start_studio
from playwright.sync_api import Page, expect

import studio_outbox
from studio_api._tokens import create_token, revoke_token
from studio_api.testing import ServeProcess
from studio_state import connect

ADMIN = "the-admin-token-for-roles"


def _in_thread(coroutine: Any) -> Any:
    # Playwright's sync API runs an event loop in this thread: use the database from another
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _tokens(db: Path) -> dict[str, str]:
    async with connect(db) as conn:
        made = {}
        for role in ("read", "operate"):
            _, made[role] = await create_token(
                conn, f"{role}-person", role, now=time.time(), actor="test"
            )
        return made


async def _revoke(db: Path, name: str) -> None:
    async with connect(db) as conn:
        await revoke_token(conn, name, now=time.time(), actor="test")


async def _enqueue(db: Path) -> str:
    async with connect(db) as conn:
        return str(
            await studio_outbox.enqueue_dispatch(
                conn, kind="report", deliver_to="ok:ops", body={"msg": "done"}, ack_required=True
            )
        )


def _login(page: Page, url: str, token: str) -> None:
    page.goto(f"{url}/login")
    page.get_by_label(re.compile("Studio token")).fill(token)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{url}/")


def _logout(page: Page) -> None:
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/login"))


def test_roles_in_the_dashboard(tmp_path: Path, page: Page, shots: Shots) -> None:
    studio: ServeProcess = start_studio(tmp_path / "roles", LIONAGI_STUDIO_AUTH_TOKEN=ADMIN)
    try:
        url = studio.url
        bearer = {"Authorization": f"Bearer {ADMIN}"}
        created = studio.request(
            "POST",
            "/api/schedules",
            headers=bearer,
            json={
                "name": "nightly",
                "trigger_type": "interval",
                "interval_sec": 3600,
                "action_kind": "agent",
                "action_prompt": "report",
            },
        )
        assert created.status_code == 201, created.text
        schedule_id = created.json()["id"]
        tokens = _in_thread(_tokens(studio.db))
        dispatch_id = _in_thread(_enqueue(studio.db))

        def attempts() -> str:
            sql = "SELECT attempt FROM dispatch_outbox WHERE id = ?"
            return str(db_rows(studio.db, sql, (dispatch_id,))[0]["attempt"])

        wait_for(lambda: attempts() == "1", what="the ack row was sent once")

        # read: every page, no button that changes anything
        _login(page, url, tokens["read"])
        expect(page.locator(".who")).to_contain_text("read-person (read)")
        page.get_by_role("link", name="Schedules", exact=True).click()
        nightly = page.locator('tr[data-schedule="nightly"]')
        expect(nightly).to_be_visible()
        for label in ("Trigger", "Disable", "Delete"):
            expect(nightly.get_by_role("button", name=label)).to_have_count(0)
        expect(page.locator("form[action='/schedules'][method='post']")).to_have_count(0)
        page.goto(f"{url}/dispatch")
        row = page.locator(f'tr[data-dispatch="{dispatch_id}"]')
        expect(row).to_be_visible()
        for label in ("Ack", "Purge", "Retry"):
            expect(row.get_by_role("button", name=label)).to_have_count(0)
        shots.take(page, "roles-read-dispatch")
        # the server refuses the hidden form all the same (the API's 403, shown as a flash)
        csrf = page.locator("form.logout input[name=csrf]").get_attribute("value")
        refused = page.request.post(
            f"{url}/schedules/{schedule_id}/trigger",
            form={"csrf": csrf or "", "back": "/schedules"},
        )
        assert "needs the operate role" in refused.text()
        assert db_rows(studio.db, "SELECT id FROM schedule_runs") == []
        # no Edit either: the schedule page hides it, the form page says why, a post is refused
        page.goto(f"{url}/schedules/{schedule_id}")
        expect(page.locator("#edit-link")).to_have_count(0)
        page.goto(f"{url}/schedules/{schedule_id}/edit")
        expect(page.locator("#edit-refused")).to_contain_text("needs admin")
        expect(page.locator("form.edit-form")).to_have_count(0)
        edit = page.request.post(
            f"{url}/schedules/{schedule_id}/edit", form={"csrf": csrf or "", "name": "renamed"}
        )
        assert edit.status == 403 and "needs the admin role" in edit.text(), edit.text()
        assert db_rows(studio.db, "SELECT name FROM schedules") == [{"name": "nightly"}]
        _logout(page)

        # operate: Trigger, Disable and Ack, but neither Delete nor the create form
        _login(page, url, tokens["operate"])
        page.goto(f"{url}/schedules")
        nightly = page.locator('tr[data-schedule="nightly"]')
        expect(nightly.get_by_role("button", name="Trigger")).to_be_visible()
        expect(nightly.get_by_role("button", name="Disable")).to_be_visible()
        expect(nightly.get_by_role("button", name="Delete")).to_have_count(0)
        expect(page.locator("form[action='/schedules'][method='post']")).to_have_count(0)
        page.goto(f"{url}/schedules/{schedule_id}")
        expect(page.get_by_role("button", name="Trigger")).to_be_visible()
        expect(page.locator("#edit-link")).to_have_count(0)
        page.goto(f"{url}/dispatch")
        row = page.locator(f'tr[data-dispatch="{dispatch_id}"]')
        row.get_by_role("button", name="Ack").click()
        expect(page.locator(".flash-notice")).to_contain_text("acknowledged")
        expect(row).to_contain_text("acked")
        ack_rows = db_rows(
            studio.db,
            "SELECT reason_code, actor FROM status_transitions WHERE entity_id = ? "
            "ORDER BY rowid DESC LIMIT 1",
            (dispatch_id,),
        )
        assert ack_rows == [{"reason_code": "dispatch.acked.operator", "actor": "operate-person"}]

        # the Audit page lists it, filtered by actor
        page.get_by_role("link", name="Audit", exact=True).click()
        page.get_by_label("Actor").fill("operate-person")
        page.get_by_role("button", name="Filter").click()
        entries = page.locator("tr[data-audit]")
        expect(entries).to_have_count(1)
        expect(entries.first).to_contain_text("dispatch.acked.operator")
        expect(entries.first).to_contain_text(dispatch_id)
        shots.take(page, "roles-audit")

        # revoked while logged in: the next page asks for a login again
        _in_thread(_revoke(studio.db, "operate-person"))
        page.goto(f"{url}/schedules")
        expect(page).to_have_url(re.compile(r"/login"))

        # admin (LIONAGI_STUDIO_AUTH_TOKEN): everything is there
        _login(page, url, ADMIN)
        page.goto(f"{url}/schedules")
        nightly = page.locator('tr[data-schedule="nightly"]')
        expect(nightly.get_by_role("button", name="Delete")).to_be_visible()
        expect(page.locator("form[action='/schedules'][method='post']")).to_have_count(1)
        page.goto(f"{url}/schedules/{schedule_id}")
        page.locator("#edit-link").click()
        page.get_by_label("Interval, seconds").fill("600")
        page.get_by_role("button", name="Save changes").click()
        expect(page.locator(".flash-notice")).to_contain_text("Schedule saved (interval_sec)")
        assert db_rows(studio.db, "SELECT interval_sec FROM schedules") == [{"interval_sec": 600}]
    finally:
        studio.close()
        studio.stop()
