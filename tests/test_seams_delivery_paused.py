"""``delivery_paused`` through a real `studio serve` and a loopback webhook receiver: webhook
dispatches delivered with no argv ``notify_template`` set are not a pause; a pending argv row
with no template is, and health and the dashboard's overview name the missing transport."""

from __future__ import annotations

import html
import importlib.util
import sqlite3
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import ROOT, count

from studio_outbox.sync import enqueue_dispatch
from studio_state.testing import wait_for

pytestmark = pytest.mark.slow


_RECEIVER = "studio_tests_webhook_receiver"


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


def _dispatch_health(server: Any) -> dict[str, Any]:
    health = server.health()
    assert health is not None
    return dict(health["dispatch"])


def test_webhooks_delivered_without_a_template_are_not_paused_an_argv_row_is(
    studio_process: Any, receiver: Any
) -> None:
    server = studio_process()
    server.start()
    created = server.request(
        "POST",
        "/api/schedules",
        json={
            "name": "hooked",
            "trigger_type": "interval",
            "interval_sec": 3600,
            "action_kind": "command",
            "action_command": "sh",
            "action_command_args": ["-c", "exit 0"],
            "action_cwd": str(server.base),
            "notify": {"deliver_to": receiver.url("/ok"), "on": ["completed"]},
        },
    )
    assert created.status_code == 201, created.text
    fired = server.request("POST", f"/api/schedules/{created.json()['id']}/trigger")
    assert fired.status_code in (200, 202), fired.text
    (request,) = receiver.wait_for(1, timeout=30)
    assert b"run.completed" in request.body
    wait_for(
        lambda: server.rows("SELECT status FROM dispatch_outbox") == [{"status": "delivered"}],
        what="the webhook dispatch is delivered",
    )
    # no argv template, webhooks delivered: nothing waits for a missing transport
    dispatch = _dispatch_health(server)
    assert dispatch["delivery_paused"] is False, dispatch
    assert dispatch["delivery_paused_transports"] == []
    assert dispatch["delivery_paused_reason"] is None
    assert dispatch["transports"]["argv"]["state"] == "paused"  # not configured, and idle
    overview = server.request("GET", "/")
    assert overview.status_code == 200
    assert "delivery paused" not in overview.text

    # a producer enqueues an argv row (not a URL): it can only wait for a template
    with sqlite3.connect(server.db) as conn:
        enqueue_dispatch(conn, kind="digest", deliver_to="ops-team", body={"n": 1})

    def paused() -> dict[str, Any] | None:
        found = _dispatch_health(server)
        return found if found["delivery_paused"] else None

    dispatch = wait_for(paused, timeout=30, what="health reports the argv row as paused")
    assert dispatch["delivery_paused_transports"] == ["argv"]
    assert dispatch["delivery_paused_dispatches"] == {"argv": 1}
    reason = "no notify_template (LIONAGI_STUDIO_NOTIFY_TEMPLATE) for 1 argv dispatch"
    assert dispatch["delivery_paused_reason"] == reason
    overview = server.request("GET", "/")
    assert f"delivery paused: {reason}" in html.unescape(overview.text)
    # the webhook row is not counted, and the argv row spent no attempt
    rows = server.rows("SELECT deliver_to, status, attempt FROM dispatch_outbox ORDER BY rowid")
    assert [(r["status"], r["attempt"]) for r in rows] == [("delivered", 1), ("pending", 0)]
    count("paused_transports_named")
