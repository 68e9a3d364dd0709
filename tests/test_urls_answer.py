"""Every URL Studio hands out answers: a real `studio serve` with real runs (completed, failed,
a page's worth and more) and webhook dispatches delivered to a loopback receiver; the URLs in
the notifications it sent, in its API's JSON views and in every link of the dashboard's pages
are each followed, and none may answer 404 or 5xx.

A dispatch's ``deliver_to`` is the user's destination, not a URL of Studio's, and is left out.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urldefrag, urlsplit

import httpx
import pytest
from conftest import ROOT, count

from studio_state.testing import wait_for

pytestmark = pytest.mark.slow

_RECEIVER = "studio_tests_webhook_receiver"
#: JSON keys whose string values are URLs (``log_url``, ``href``, ``links`` ...).
_URL_KEY = re.compile(r"(url|href|link|links)$", re.IGNORECASE)
#: Keys holding the user's own destinations, not Studio's URLs.
_NOT_STUDIOS = {"deliver_to"}


def _receiver_module() -> Any:
    # the outbox's test receiver, loaded by path (there is no tests package)
    if _RECEIVER not in sys.modules:
        path = ROOT / "packages" / "outbox" / "tests" / "webhook_receiver.py"
        spec = importlib.util.spec_from_file_location(_RECEIVER, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[_RECEIVER] = module
        spec.loader.exec_module(module)
    return sys.modules[_RECEIVER]


@pytest.fixture
def receiver() -> Iterator[Any]:
    with _receiver_module().serve_receiver() as running:
        yield running


def urls_in_json(value: Any, key: str = "") -> Iterator[str]:
    """String values under URL-named keys, and any string that is an ``/api/`` path."""
    if isinstance(value, dict):
        for name, item in value.items():
            if name not in _NOT_STUDIOS:
                yield from urls_in_json(item, str(name))
    elif isinstance(value, list):
        for item in value:
            yield from urls_in_json(item, key)
    elif isinstance(value, str) and (
        (_URL_KEY.search(key) and value.startswith(("/", "http://", "https://")))
        or value.startswith("/api/")
    ):
        yield value


class _Links(HTMLParser):
    """``href`` and ``src`` of every element, and ``data-*`` attributes holding a path."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("href", "src") or (name.startswith("data-") and value.startswith("/")):
                self.found.append(value)


def links_in(html: str) -> list[str]:
    parser = _Links()
    parser.feed(html)
    return parser.found


def _trigger(server: Any, schedule_id: str) -> str:
    """Fire a schedule now (retrying while its previous run still holds it)."""
    deadline = time.monotonic() + 60
    while True:
        answer = server.request("POST", f"/api/schedules/{schedule_id}/trigger")
        if answer.status_code == 202:
            return str(answer.json()["run_id"])
        assert answer.status_code == 409 and time.monotonic() < deadline, answer.text
        time.sleep(0.05)


def _final(server: Any, run_id: str) -> bool:
    status = server.request("GET", f"/api/schedules/runs/{run_id}").json()["status"]
    return status in ("completed", "failed", "skipped", "cancelled", "timed_out")


def test_every_url_studio_hands_out_answers(studio_process: Any, receiver: Any) -> None:
    server = studio_process()
    server.start()
    base = server.url
    schedules: dict[str, str] = {}
    for name, code in (("fine", 0), ("broken", 3)):
        created = server.request(
            "POST",
            "/api/schedules",
            json={
                "name": name,
                "trigger_type": "interval",
                "interval_sec": 3600,
                "action_kind": "command",
                "action_command": "sh",
                "action_command_args": ["-c", f"echo {name}; exit {code}"],
                "action_cwd": str(server.base),
                "notify": {"deliver_to": receiver.url("/ok"), "on": ["completed", "failed"]},
            },
        )
        assert created.status_code == 201, created.text
        schedules[name] = created.json()["id"]
    runs = [_trigger(server, schedules["broken"])]
    # more runs (and dispatches) than a dashboard page holds, so its pages link onwards
    for _ in range(52):
        runs.append(_trigger(server, schedules["fine"]))
        wait_for(lambda run_id=runs[-1]: _final(server, run_id), what="the run ends")
    wait_for(lambda: _final(server, runs[0]), what="the failed run ends")
    received = receiver.wait_for(len(runs), timeout=60)
    wait_for(
        lambda: (
            server.rows("SELECT count(*) AS n FROM dispatch_outbox WHERE status = 'pending'")
            == [{"n": 0}]
        ),
        what="every notification's outcome is written",
    )

    found: dict[str, str] = {}  # url -> where it was seen

    def seen(urls: Any, where: str) -> None:
        for url in urls:
            found.setdefault(url, where)

    # notifications as delivered
    for request in received:
        seen(urls_in_json(json.loads(request.body)), "a run notification")
    assert any(where == "a run notification" for where in found.values()), "no URL sent"
    # the API's JSON views
    dispatches = server.request("GET", "/api/dispatch", params={"limit": 5}).json()
    views = [
        "/api/health",
        "/api/schedules",
        "/api/schedules/limits",
        *(f"/api/schedules/{sid}" for sid in schedules.values()),
        *(f"/api/schedules/{sid}/runs" for sid in schedules.values()),
        "/api/runs",
        *(f"/api/schedules/runs/{rid}" for rid in (runs[0], runs[-1])),
        "/api/dispatch",
        *(f"/api/dispatch/{d['id']}" for d in dispatches["dispatches"]),
    ]
    for view in views:
        answer = server.request("GET", view)
        assert answer.status_code == 200, (view, answer.text)
        seen(urls_in_json(answer.json()), view)
    # every link on the dashboard's pages
    pages = [
        "/",
        "/schedules",
        *(f"/schedules/{sid}" for sid in schedules.values()),
        f"/schedules/{schedules['fine']}?run={runs[-1]}",
        f"/schedules/{schedules['fine']}/delete",
        "/runs",
        *(f"/runs/{rid}" for rid in (runs[0], runs[-1])),
        "/dispatch",
        "/dispatch?status=delivered",
    ]
    for page in pages:
        answer = server.request("GET", page)
        assert answer.status_code == 200, (page, answer.text[:500])
        seen(links_in(answer.text), page)
    assert any("offset=50" in url for url in found), "no page linked onwards"

    broken: list[str] = []
    with httpx.Client(base_url=base, timeout=30) as client:
        for url, where in sorted(found.items()):
            target, _ = urldefrag(url)
            parts = urlsplit(target)
            if parts.scheme and f"{parts.scheme}://{parts.netloc}" != base:
                continue  # another site (none is expected)
            path = target.removeprefix(base) or "/"
            assert path.startswith("/"), (url, where)
            with client.stream("GET", path) as answer:  # a log stream is not read to its end
                status = answer.status_code
            if status == 404 or status >= 500:
                broken.append(f"{url} (from {where}): {status}")
    assert not broken, "\n".join(broken)
    assert "Traceback" not in server.log()
    count("studio_urls_followed", len(found))
