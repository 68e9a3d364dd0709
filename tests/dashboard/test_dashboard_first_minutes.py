"""A new user's first minutes, in headless Chromium against a real `studio serve`.

``/docs`` renders with the network off; the run page says how a run was triggered, shows the
argv that ran and a quiet run's empty log as "waiting for output"; reason codes keep their
words whole.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from conftest import wait_for
from dashboard_fixtures import Recorded, Shots
from playwright.sync_api import Page, Route, expect

from studio_api.testing import ServeProcess


def create(server: ServeProcess, name: str, **action: object) -> dict[str, Any]:
    body = {"name": name, "trigger_type": "interval", "interval_sec": 3600, **action}
    answer = server.request("POST", "/api/schedules", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def trigger(server: ServeProcess, schedule_id: str) -> str:
    answer = server.request("POST", f"/api/schedules/{schedule_id}/trigger")
    assert answer.status_code == 202, answer.text
    return str(answer.json()["run_id"])


def run_status(server: ServeProcess, run_id: str) -> str:
    return str(server.request("GET", f"/api/schedules/runs/{run_id}").json()["status"])


def network_off(page: Page) -> list[str]:
    """Abort every request that would leave 127.0.0.1; the list collects their URLs."""
    left: list[str] = []

    def only_loopback(route: Route) -> None:
        url = route.request.url
        if url.startswith("data:") or urlsplit(url).hostname == "127.0.0.1":
            route.continue_()
        else:
            left.append(url)
            route.abort("internetdisconnected")

    page.route("**/*", only_loopback)
    return left


def test_docs_render_with_the_network_off(
    studio: ServeProcess, page: Page, shots: Shots, recorded: Recorded
) -> None:
    left = network_off(page)
    page.goto(f"{studio.url}/docs")
    expect(page.locator(".opblock").first).to_be_visible()
    create_op = page.locator(".opblock-post", has=page.locator('[data-path="/api/schedules"]'))
    expect(create_op.first).to_be_visible()
    # the request body's examples are offered by name
    create_op.first.locator(".opblock-summary").click()
    examples = create_op.first.locator("select.examples-select-element").first
    expect(examples).to_contain_text("cron trigger, command action")
    expect(examples).to_contain_text("flow_yaml action")
    shots.take(page, "docs-offline")

    assert left == [], f"the docs asked another host: {left}"
    assert recorded.offsite() == []


def test_run_page_of_a_quiet_manual_run(studio: ServeProcess, page: Page, shots: Shots) -> None:
    code = "import time; time.sleep(120)"
    quiet = create(
        studio,
        "quiet-sleeper",
        action_kind="command",
        action_command="python3",
        action_command_args=["-c", code],
    )
    run_id = trigger(studio, quiet["id"])
    wait_for(lambda: run_status(studio, run_id) == "running", what="the run is running")

    page.goto(f"{studio.url}/runs/{run_id}")
    live = page.locator("#live-run")
    expect(live.locator("[data-status]").first).to_have_attribute("data-status", "running")
    # how it started: by the operator, not by its trigger
    expect(live).to_contain_text("triggered manually")
    expect(live).not_to_contain_text("the trigger was due")
    # the argv that runs, one box per word
    words = page.locator("#run-argv code").all_inner_texts()
    assert words[-2:] == ["-c", code], words
    assert words[0].endswith("python3"), words
    # the log panel of a run that has printed nothing says so, and keeps saying it
    log = page.locator("#run-log")
    expect(log).to_contain_text("waiting for output")
    page.wait_for_timeout(1500)
    expect(log).to_contain_text("waiting for output")
    shots.take(page, "run-quiet-manual")

    page.get_by_role("button", name="Cancel").click()
    expect(live.locator("[data-status]").first).to_have_attribute("data-status", "cancelled")


def test_a_run_that_prints_replaces_the_waiting_note(studio: ServeProcess, page: Page) -> None:
    talker = create(
        studio,
        "slow-talker",
        action_kind="command",
        action_command="python3",
        action_command_args=["-c", "import time; time.sleep(2); print('hello at last')"],
    )
    run_id = trigger(studio, talker["id"])
    page.goto(f"{studio.url}/runs/{run_id}")
    log = page.locator("#run-log")
    expect(log).to_contain_text("hello at last")
    expect(log).not_to_contain_text("waiting for output")
    expect(page.locator("#live-run [data-status]").first).to_have_attribute(
        "data-status", "completed"
    )


# Where each line of an element's text starts: for every character, the top of its box; a
# character lower than the one before it starts a new line.
_LINE_BREAKS = """
(element) => {
  const breaks = [];
  let text = "";
  let lastTop = null;
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.data.length; i++) {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const rect = range.getClientRects()[0];
      if (rect && node.data[i].trim()) {
        if (lastTop !== null && rect.top > lastTop + rect.height / 2) breaks.push(text.length);
        lastTop = rect.top;
      }
      text += node.data[i];
    }
  }
  return { text: text.trim(), breaks: breaks.map((at) => text.slice(0, at).trimEnd()) };
}
"""


def test_reason_codes_wrap_only_at_dots(studio: ServeProcess, page: Page, shots: Shots) -> None:
    for n in range(3):
        failing = create(
            studio, f"flaky-{n}", action_kind="agent", action_prompt="exit=3 stderr=boom"
        )
        run_id = trigger(studio, failing["id"])
        wait_for(lambda run_id=run_id: run_status(studio, run_id) == "failed", what="it failed")

    wrapped = 0
    for width in (1280, 1000, 820, 390, 300):
        page.set_viewport_size({"width": width, "height": 900})
        for path in ("/", "/runs"):
            page.goto(f"{studio.url}{path}")
            cells = page.locator('td[data-label="Reason"]')
            expect(cells.first).to_contain_text("run.")
            for index in range(cells.count()):
                seen = cells.nth(index).evaluate(_LINE_BREAKS)
                for before in seen["breaks"]:
                    assert before.endswith("."), (
                        f"{path} at {width}px: {seen['text']!r} breaks after {before!r}"
                    )
                wrapped += bool(seen["breaks"])
        shots.take(page, f"reasons-{width}")
    assert wrapped, "no reason code wrapped at any width: the check saw nothing"
