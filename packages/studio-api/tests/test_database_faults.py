"""The database file deleted under a running server: health degrades, writes are refused.

The engine's connection keeps the deleted file open, so without a check every write would be
acknowledged (201, 202) into a file nobody can open again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _remove(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def test_a_deleted_database_degrades_health_and_refuses_requests(
    studio: Any, command_schedule: Any, wait: Any
) -> None:
    assert studio.client.get("/api/health").json()["status"] == "ok"
    _remove(Path(studio.settings.db))
    health = wait(
        lambda: (body := studio.client.get("/api/health").json())["status"] == "degraded" and body,
        timeout=30,
    )
    assert "was deleted" in health["scheduler"]["last_tick_error"]
    assert str(studio.settings.db) in health["scheduler"]["last_tick_error"]
    assert health["scheduler"]["running"] is True  # the loop lives on (no crash, no loop)
    for method, path, body in (
        ("POST", "/api/schedules", command_schedule("after-delete")),
        ("GET", "/api/schedules", None),
        (
            "POST",
            "/api/runs",
            {"action_kind": "command", "action_command": "sh", "action_command_args": ["x"]},
        ),
    ):
        answer = studio.client.request(method, path, json=body)
        assert answer.status_code == 503, (path, answer.text)
        assert "was deleted" in answer.json()["detail"]
        assert answer.headers["retry-after"]
    assert not Path(studio.settings.db).exists()  # nothing recreated an empty database
