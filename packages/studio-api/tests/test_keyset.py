"""Keyset paging through the real app: ``next_cursor`` walks every row once, in order, while
new rows arrive; a bad cursor, or a cursor with an offset, is a 422 naming ``cursor``."""

from __future__ import annotations

import base64
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio_outbox import sync


def enqueue(db: Path, **kwargs: Any) -> str:
    """Enqueue like another producer process: its own ``sqlite3`` connection."""
    conn = sync.connect(db)
    try:
        return sync.enqueue_dispatch(conn, **kwargs)
    finally:
        conn.close()


def _walk(studio: Any, path: str, items: str, between: Callable[[int], None]) -> list[str]:
    """Every id the cursor walk returns, calling ``between(page)`` before each next page."""
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 3}
    for page in range(100):
        answer = studio.client.get(path, params=params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        seen += [row["id"] for row in body[items]]
        if body["next_cursor"] is None:
            return seen
        assert len(body[items]) == 3
        between(page)
        params = {"limit": 3, "cursor": body["next_cursor"]}
    raise AssertionError("the walk never ended")


def _all_ids(studio: Any, path: str, items: str) -> list[str]:
    return [row["id"] for row in studio.client.get(path, params={"limit": 1000}).json()[items]]


def test_dispatch_walk_returns_every_row_once_while_rows_arrive(studio: Any) -> None:
    for i in range(8):
        enqueue(studio.settings.db, kind="a", deliver_to="x", body={"i": i})
    before = _all_ids(studio, "/api/dispatch", "dispatches")

    def arrive(page: int) -> None:
        enqueue(studio.settings.db, kind="a", deliver_to="x", body={"new": page})

    walked = _walk(studio, "/api/dispatch", "dispatches", arrive)
    assert walked == before and len(set(walked)) == 8
    filtered = studio.client.get("/api/dispatch", params={"kind": "a", "limit": 5}).json()
    rest = studio.client.get(
        "/api/dispatch", params={"kind": "a", "limit": 5, "cursor": filtered["next_cursor"]}
    ).json()
    ids = [d["id"] for d in filtered["dispatches"] + rest["dispatches"]]
    assert ids == _all_ids(studio, "/api/dispatch", "dispatches")[:10]
    offset_page = studio.client.get("/api/dispatch", params={"limit": 2, "offset": 2}).json()
    assert [d["id"] for d in offset_page["dispatches"]] == ids[2:4]
    assert offset_page["next_cursor"] is not None


def _insert_runs(db: Path, schedule_id: str, start: int, count: int, at: float) -> None:
    # Pairs of runs share fired_at and created_at: the id alone breaks the tie.
    with sqlite3.connect(db) as conn:
        conn.executemany(
            "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, "
            "action_args, status, fired_at, created_at) "
            "VALUES (?, ?, '{}', 'command', '{}', 'completed', ?, ?)",
            [
                (f"run{i:05d}", schedule_id, at + i // 2, at + i // 2)
                for i in range(start, start + count)
            ],
        )
    conn.close()


def test_schedule_runs_walk_returns_every_run_once_while_runs_arrive(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    created = studio.client.post("/api/schedules", json=command_schedule("s")).json()
    at = time.time() - 10_000
    _insert_runs(studio.settings.db, created["id"], 0, 10, at)
    path = f"/api/schedules/{created['id']}/runs"
    before = _all_ids(studio, path, "runs")
    assert before == [f"run{i:05d}" for i in reversed(range(10))]
    added = iter(range(10, 100))

    def arrive(page: int) -> None:
        _insert_runs(studio.settings.db, created["id"], next(added), 1, at + 1000)

    assert _walk(studio, path, "runs", arrive) == before
    failed = studio.client.get(path, params={"status": "failed", "limit": 1}).json()
    assert failed["runs"] == [] and failed["next_cursor"] is None


def test_ad_hoc_runs_walk_returns_every_run_once_while_runs_arrive(
    studio: Any, workdir: Path, script: Callable[[str, str], Path]
) -> None:
    ok = script("ok.sh", "exit 0\n")
    body = {
        "action_kind": "command",
        "action_command": "sh",
        "action_command_args": [str(ok)],
        "action_cwd": str(workdir),
    }
    for _ in range(7):
        assert studio.client.post("/api/runs", json=body).status_code == 202
    before = _all_ids(studio, "/api/runs", "runs")
    assert len(before) == 7

    def arrive(page: int) -> None:
        assert studio.client.post("/api/runs", json=body).status_code == 202

    assert _walk(studio, "/api/runs", "runs", arrive) == before


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_a_bad_cursor_is_a_422_naming_cursor(
    studio: Any, command_schedule: Callable[..., dict[str, Any]]
) -> None:
    created = studio.client.post("/api/schedules", json=command_schedule("s")).json()
    for i in range(3):
        enqueue(studio.settings.db, kind="a", deliver_to="x", body={"i": i})
    dispatch_cursor = studio.client.get("/api/dispatch", params={"limit": 1}).json()["next_cursor"]
    assert dispatch_cursor is not None
    bad = [
        "!!!",
        "",
        _b64(b"not json"),
        _b64(b'{"a": 1}'),
        _b64(b"[]"),
        _b64(b'[true, "x"]'),
        _b64(b"[0]"),
        _b64(b'[1.5, 2.5, 3, "x"]'),
        "A" * 5000,
    ]
    paths = ["/api/dispatch", "/api/runs", f"/api/schedules/{created['id']}/runs"]
    for path in paths:
        for cursor in [*bad, dispatch_cursor if path != "/api/dispatch" else _b64(b'["x"]')]:
            answer = studio.client.get(path, params={"cursor": cursor})
            assert answer.status_code == 422, (path, cursor, answer.text)
            assert answer.json()["field"] == "cursor", (path, cursor, answer.text)
    run_cursor = _b64(b'[1.0, 1.0, "x"]')
    for path, cursor in [
        ("/api/dispatch", dispatch_cursor),
        ("/api/runs", _b64(b'[1.0, "x"]')),
        (f"/api/schedules/{created['id']}/runs", run_cursor),
    ]:
        assert studio.client.get(path, params={"cursor": cursor}).status_code == 200
        both = studio.client.get(path, params={"cursor": cursor, "offset": 1})
        assert both.status_code == 422 and both.json()["field"] == "cursor", both.text
        zero = studio.client.get(path, params={"cursor": cursor, "offset": 0})
        assert zero.status_code == 200, zero.text
