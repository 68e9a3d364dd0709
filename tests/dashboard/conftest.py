"""Browser fixtures: Debian's chromium driven by Playwright, a real `studio serve`, a fake li.

The browser is the ``chromium`` on PATH (never one Playwright downloads). When it is missing
the fixture installs Debian's package itself if it can (root, ``apt-get`` reachable);
otherwise the test fails with one line naming what to install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from studio_api.testing import ServeProcess
from studio_launcher.testing import write_fake_li
from studio_scheduler_core import FINAL_RUN_STATUSES
from studio_state.testing import wait_for

# pytest drops ``conftest`` from sys.modules before importing each conftest that is not in a
# package; put the parent one (tests/conftest.py, loaded first) back for the test modules.
_PARENT_FILE = str(Path(__file__).resolve().parent.parent / "conftest.py")
_PARENT = next(m for m in list(sys.modules.values()) if getattr(m, "__file__", "") == _PARENT_FILE)
sys.modules["conftest"] = _PARENT

# The tests import the helpers below by name (``from dashboard_fixtures import Shots``); under
# pytest's importlib import mode a conftest is not importable by its own name.
sys.modules.setdefault("dashboard_fixtures", sys.modules[__name__])

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
INSTALL_HINT = "the dashboard tests need Debian's chromium: run `apt-get install -y chromium`"
#: Where a copy of the screenshots goes for a person to look at: this variable's folder when
#: set, else ``test-output/screenshots/`` at the repository's root (ignored by git).
SHOTS_ENV = "STUDIO_DASHBOARD_SHOTS"
DEFAULT_SHOTS = Path(__file__).resolve().parents[2] / "test-output" / "screenshots"
# The notify template the servers deliver with: a deliver_to starting with "ok" succeeds.
NOTIFY_TEMPLATE = [
    sys.executable,
    "-c",
    "import sys; sys.exit(0 if sys.argv[1].startswith('ok') else 1)",
    "{deliver_to}",
]


def find_chromium() -> str:
    """The chromium binary, installing Debian's package first when missing and possible."""
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
            subprocess.run(argv, env=env, capture_output=True, timeout=900, check=False)
        found = shutil.which("chromium")
        if found:
            return found
    pytest.fail(INSTALL_HINT, pytrace=False)


# live parts refresh every 3 s, and runs take a few seconds: wait for them generously
expect.set_options(timeout=20_000)


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def browser(playwright: Playwright) -> Iterator[Browser]:
    launched = playwright.chromium.launch(
        executable_path=find_chromium(), headless=True, args=CHROMIUM_ARGS
    )
    yield launched
    launched.close()


class Recorded:
    """Every URL the pages of a context requested."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    def offsite(self) -> list[str]:
        """Requests that went anywhere but 127.0.0.1 (``data:`` URLs stay in the page)."""
        return [
            url
            for url in self.urls
            if not url.startswith("data:") and urlsplit(url).hostname != "127.0.0.1"
        ]


@pytest.fixture
def recorded() -> Recorded:
    return Recorded()


@pytest.fixture
def context(browser: Browser, recorded: Recorded) -> Iterator[BrowserContext]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    ctx.on("request", lambda request: recorded.urls.append(request.url))
    ctx.set_default_timeout(20_000)
    yield ctx
    ctx.close()
    assert recorded.offsite() == [], f"requests left 127.0.0.1: {recorded.offsite()}"


@pytest.fixture
def page(context: BrowserContext) -> Page:
    opened = context.new_page()
    opened.on("dialog", lambda dialog: dialog.accept())  # the Delete / Purge confirmations
    return opened


class Shots:
    """Screenshots of each page: under the test's tmp dir, a copy (the latest of each name)
    in $STUDIO_DASHBOARD_SHOTS or ``test-output/screenshots/``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.copy_to = Path(os.environ[SHOTS_ENV]) if os.environ.get(SHOTS_ENV) else DEFAULT_SHOTS

    def take(self, page: Page, name: str) -> Path:
        path = self.folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 1000, path
        self.copy_to.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, self.copy_to / path.name)
        return path


@pytest.fixture
def shots(tmp_path: Path) -> Shots:
    return Shots(tmp_path / "screenshots")


def start_studio(base: Path, **env: str) -> ServeProcess:
    """A real `studio serve` on 127.0.0.1 with the fake li and a notify template."""
    li = write_fake_li(base / "fake-li")
    server = ServeProcess(
        base,
        env={
            "LIONAGI_LI_EXECUTABLE": str(li),
            "LIONAGI_STUDIO_NOTIFY_TEMPLATE": json.dumps(NOTIFY_TEMPLATE),
            **env,
        },
    )
    server.start()
    return server


@pytest.fixture
def studio(tmp_path: Path) -> Iterator[ServeProcess]:
    # a zone other than UTC, so the pages show local times with UTC on hover
    server = start_studio(tmp_path / "studio", LIONAGI_SCHEDULER_TZ="America/New_York")
    yield server
    server.close()
    server.stop()


def api_routes(server: ServeProcess, **kwargs: Any) -> set[str]:
    """The paths the server's OpenAPI document lists (which optional routes it serves)."""
    return set(server.request("GET", "/openapi.json", **kwargs).json()["paths"])


def run_to_the_end(server: ServeProcess, schedule_id: str) -> dict[str, Any]:
    """Trigger the schedule through the API and wait for the run to end; its view."""
    answer = server.request("POST", f"/api/schedules/{schedule_id}/trigger")
    assert answer.status_code == 202, answer.text
    run_id = answer.json()["run_id"]

    def ended() -> dict[str, Any] | None:
        run = server.request("GET", f"/api/schedules/runs/{run_id}").json()
        return run if run["status"] in FINAL_RUN_STATUSES else None

    wait_for(lambda: ended() is not None, what=f"run {run_id} ended")
    return ended() or {}
