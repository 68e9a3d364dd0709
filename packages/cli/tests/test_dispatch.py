"""``studio dispatch …`` against a real outbox database seeded with studio_outbox itself."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import Studio

import studio_outbox
from studio_state import connect


async def enqueue(db: Path, **kwargs: Any) -> str:
    async with connect(db) as conn:
        await studio_outbox.ensure_schema(conn)
        dispatch_id: str = await studio_outbox.enqueue_dispatch(conn, **kwargs)
        return dispatch_id


async def dead_letter(db: Path, **kwargs: Any) -> str:
    """A dispatch whose only attempt failed (transport `false`): dead_letter."""
    dispatch_id = await enqueue(db, max_attempts=1, **kwargs)
    async with connect(db) as conn:
        await studio_outbox.deliver_due_dispatches(conn, notify_template=["false"])
        row = await studio_outbox.get_dispatch(conn, dispatch_id)
    assert row is not None and row["status"] == "dead_letter", row
    return dispatch_id


def ack_token(db: Path, dispatch_id: str) -> str:
    """The row's token, as the consumer would find it in the payload it was sent."""
    with sqlite3.connect(db) as conn:
        (token,) = conn.execute(
            "SELECT ack_token FROM dispatch_outbox WHERE id = ?", (dispatch_id,)
        ).fetchone()
    assert isinstance(token, str) and token
    return token


async def status_of(db: Path, dispatch_id: str) -> str | None:
    async with connect(db) as conn:
        row = await studio_outbox.get_dispatch(conn, dispatch_id)
    return None if row is None else str(row["status"])


async def test_list_table_json_and_filters(studio: Studio) -> None:
    assert studio.run("dispatch", "list").stdout.strip() == "no dispatches"
    first = await enqueue(studio.db, kind="alert", deliver_to="ops", body={"n": 1})
    second = await enqueue(studio.db, kind="digest", deliver_to="team", ack_required=True)
    table = studio.run("dispatch", "list").stdout
    for header in ("ID", "KIND", "DELIVER TO", "STATUS", "ATTEMPT", "CREATED"):
        assert header in table
    assert first in table and second in table and "pending" in table and "0/8" in table
    document = studio.ok_json("dispatch", "list")
    assert document["total"] == 2
    assert {row["id"] for row in document["dispatches"]} == {first, second}
    for row in document["dispatches"]:
        assert "ack_token" not in row and "payload" not in row
    only = studio.ok_json("dispatch", "list", "--kind", "digest")
    assert [row["id"] for row in only["dispatches"]] == [second] and only["total"] == 1
    none = studio.ok_json("dispatch", "list", "--status", "acked")
    assert none["dispatches"] == [] and none["total"] == 0


async def test_show_never_reveals_the_ack_token(studio: Studio) -> None:
    dispatch_id = await enqueue(
        studio.db, kind="alert", deliver_to="ops", body={"msg": "disk full"}, ack_required=True
    )
    token = ack_token(studio.db, dispatch_id)
    table = studio.run("dispatch", "show", dispatch_id)
    assert "disk full" in table.stdout and "FIELD" in table.stdout
    assert token not in table.stdout
    document = studio.ok_json("dispatch", "show", dispatch_id)
    assert document["id"] == dispatch_id and document["payload"]["body"] == {"msg": "disk full"}
    assert "ack_token" not in document and "ack_token" not in document["payload"]
    assert token not in studio.run("dispatch", "show", dispatch_id, "--json").stdout
    missing = studio.fail("dispatch", "show", "000000000000")
    assert missing.error_line == "error: dispatch not found: 000000000000"


async def test_ack_success_and_refusals(studio: Studio) -> None:
    dispatch_id = await enqueue(studio.db, kind="alert", deliver_to="ops", ack_required=True)
    token = ack_token(studio.db, dispatch_id)
    wrong = studio.fail("dispatch", "ack", dispatch_id, "not-the-token")
    assert "not-the-token" not in wrong.error_line
    assert await status_of(studio.db, dispatch_id) == "pending"
    assert studio.run("dispatch", "ack", dispatch_id, token).stdout.strip() == (
        f"Acked dispatch {dispatch_id}"
    )
    assert await status_of(studio.db, dispatch_id) == "acked"
    again = studio.ok_json("dispatch", "ack", dispatch_id, token)
    assert again == {"dispatch_id": dispatch_id, "acked": True, "status": "acked"}
    plain = await enqueue(studio.db, kind="alert", deliver_to="ops")
    assert "error: " in studio.fail("dispatch", "ack", plain, "x").error_line
    assert "000000000000" in studio.fail("dispatch", "ack", "000000000000", "x").error_line


async def test_retry_dead_letter_and_refusal(studio: Studio) -> None:
    dispatch_id = await dead_letter(studio.db, kind="alert", deliver_to="ops")
    listed = studio.ok_json("dispatch", "list", "--status", "dead_letter")
    assert [row["id"] for row in listed["dispatches"]] == [dispatch_id]
    assert listed["dispatches"][0]["last_error"]
    result = studio.run("dispatch", "retry", dispatch_id)
    assert result.stdout.strip() == f"Dispatch {dispatch_id} queued for retry (pending)"
    assert await status_of(studio.db, dispatch_id) == "pending"
    refused = studio.fail("dispatch", "retry", dispatch_id)
    assert "pending" in refused.error_line
    again = await dead_letter(studio.db, kind="alert", deliver_to="ops")
    assert studio.ok_json("dispatch", "retry", again) == {
        "dispatch_id": again,
        "requeued": True,
        "status": "pending",
    }
    assert "000000000000" in studio.fail("dispatch", "retry", "000000000000").error_line


async def test_purge_needs_yes_then_deletes(studio: Studio) -> None:
    dispatch_id = await enqueue(studio.db, kind="alert", deliver_to="ops")
    refused = studio.fail("dispatch", "purge", dispatch_id)
    assert "pass --yes" in refused.error_line
    assert await status_of(studio.db, dispatch_id) == "pending"
    done = studio.run("dispatch", "purge", dispatch_id, "--yes")
    assert done.stdout.strip() == f"Purged dispatch {dispatch_id} (was pending)"
    assert await status_of(studio.db, dispatch_id) is None
    other = await enqueue(studio.db, kind="alert", deliver_to="ops")
    assert studio.ok_json("dispatch", "purge", other, "-y") == {
        "dispatch_id": other,
        "purged": True,
        "status": "pending",
    }
    missing = studio.fail("dispatch", "purge", "000000000000", "--yes")
    assert missing.error_line == "error: dispatch not found: 000000000000"


@pytest.mark.parametrize("command", ["list", "show"])
async def test_dispatch_commands_honour_db_flag(
    studio: Studio, tmp_path: Path, command: str
) -> None:
    other = tmp_path / "producer.db"
    dispatch_id = await enqueue(other, kind="alert", deliver_to="ops")
    args = ["dispatch", command, *([dispatch_id] if command == "show" else []), "--db", str(other)]
    assert dispatch_id in studio.run(*args).stdout
