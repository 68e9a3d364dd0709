"""Each delivery outcome is one JSON log line of a real `studio serve`: webhook dispatches to a
loopback receiver (delivered, and dead-lettered by a 410) and an argv dispatch through the
notify template, each with the dispatch's id, kind, transport, outcome and reason code."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from studio_state.testing import wait_for

_RECEIVER = "studio_tests_webhook_receiver"


def _receiver_module() -> Any:
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


def _delivery_lines(server: Any) -> dict[str, dict[str, Any]]:
    lines: dict[str, dict[str, Any]] = {}
    for line in server.log().splitlines():
        if line.startswith("{"):
            data = json.loads(line)
            if data.get("event") == "delivery" and "dispatch_id" in data:
                lines[data["dispatch_id"]] = data
    return lines


def test_each_delivery_outcome_is_a_json_event_line(
    studio_process: Any, receiver: Any, tmp_path: Path
) -> None:
    server = studio_process(
        env={
            "LIONAGI_STUDIO_LOG_FORMAT": "json",
            "LIONAGI_STUDIO_NOTIFY_TEMPLATE": '["true", "{payload}"]',
        }
    )
    server.start()
    sent: dict[str, tuple[str, str, str, str]] = {}
    for kind, to, expected in (
        ("deploy.finished", receiver.url("/ok"), ("webhook", "delivered", "transport_ok")),
        ("deploy.gone", receiver.url("/gone"), ("webhook", "dead_letter", "gone")),
        ("deploy.pager", "ops-pager", ("argv", "delivered", "transport_ok")),
    ):
        answer = server.request(
            "POST", "/api/dispatch", json={"kind": kind, "deliver_to": to, "body": {"x": 1}}
        )
        assert answer.status_code == 201, answer.text
        sent[answer.json()["id"]] = (kind, *expected)
    lines = wait_for(
        lambda: (found := _delivery_lines(server)) and set(sent) <= set(found) and found,
        timeout=30,
        what="a delivery line per dispatch",
    )
    for dispatch_id, (kind, transport, outcome, reason) in sent.items():
        line = lines[dispatch_id]
        assert line["kind"] == kind, line
        assert line["transport"] == transport, line
        assert line["outcome"] == outcome, line
        assert line["reason_code"].endswith(reason), line
        assert line["level"] == ("WARNING" if outcome == "dead_letter" else "INFO"), line
    # one line per outcome: no dispatch is reported twice
    raw = [json.loads(x) for x in server.log().splitlines() if x.startswith("{")]
    ids = [x["dispatch_id"] for x in raw if x.get("event") == "delivery" and "dispatch_id" in x]
    assert sorted(ids) == sorted(sent)
