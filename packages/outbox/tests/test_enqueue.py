from __future__ import annotations

import asyncio
import json
import math
import sys
import textwrap
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_outbox
import studio_state
from studio_outbox import InvalidDispatch


async def test_enqueue_writes_pending_row_payload_and_one_transition(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn,
        kind="pr_review",
        deliver_to="team-a",
        body={"pr": 7, "title": "Fix ünïcode"},
        session_id="sess1",
        schedule_run_id="run1",
        expires_at=clock() + 600,
        clock=clock,
    )
    assert len(dispatch_id) == 12 and int(dispatch_id, 16) >= 0
    row = await probe.row(dispatch_id)
    assert row["status"] == "pending"
    assert row["attempt"] == 0
    assert row["max_attempts"] == 8
    assert row["next_attempt_at"] == row["created_at"] == row["updated_at"] == clock()
    assert row["ack_required"] == 0 and row["ack_token"] is None
    assert row["dedup_key"] is None and row["last_error"] is None
    assert json.loads(row["payload"]) == {
        "dispatch_id": dispatch_id,
        "kind": "pr_review",
        "deliver_to": "team-a",
        "attempt": 0,
        "body": {"pr": 7, "title": "Fix ünïcode"},
        "created_at": clock(),
        "expires_at": clock() + 600,
        "session_id": "sess1",
        "schedule_run_id": "run1",
    }
    assert await probe.history(dispatch_id) == [
        {
            "previous_status": None,
            "status": "pending",
            "reason_code": "dispatch.pending.enqueued",
            "reason_summary": "enqueued kind=pr_review",
            "actor": "studio_outbox",
            "created_at": clock(),
        }
    ]


@pytest.mark.parametrize("ack_required", [False, True])
async def test_the_stored_payload_is_compact_json_byte_for_byte(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, ack_required: bool
) -> None:
    # Text that JSON must escape, in every string field, and both None and numbers.
    awkward = 'quote " back \\ slash\ttab\nnewline ü ☃ \U0001f600 \x7f \x1f'
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn,
        kind="k " + awkward,
        deliver_to="d " + awkward,
        body={"text": awkward, "n": 1.5},
        ack_required=ack_required,
        session_id=None if ack_required else "s " + awkward,
        schedule_run_id="r " + awkward,
        expires_at=None if ack_required else clock() + 0.1,
        clock=clock,
    )
    row = await probe.row(dispatch_id)
    expected: dict[str, Any] = {
        "dispatch_id": dispatch_id,
        "kind": "k " + awkward,
        "deliver_to": "d " + awkward,
        "attempt": 0,
    }
    if ack_required:
        expected["ack_token"] = row["ack_token"]
    expected |= {
        "body": {"text": awkward, "n": 1.5},
        "created_at": clock(),
        "expires_at": None if ack_required else clock() + 0.1,
        "session_id": None if ack_required else "s " + awkward,
        "schedule_run_id": "r " + awkward,
    }
    assert row["payload"] == json.dumps(expected, separators=(",", ":"))


class _Body(dict[str, Any]):
    """A dict subclass: encoded from a plain copy, as any other mapping."""


@pytest.mark.parametrize(
    "body",
    [types.MappingProxyType({"b": [1, "x"], "a": None}), _Body(b=[1, "x"], a=None)],
    ids=["mappingproxy", "dict-subclass"],
)
async def test_a_body_that_is_any_mapping_is_stored_as_its_json(
    conn: aiosqlite.Connection, probe: Any, body: Mapping[str, Any]
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d", body=body)
    payload = (await probe.row(dispatch_id))["payload"]
    assert '"body":{"b":[1,"x"],"a":null}' in payload
    assert json.loads(payload)["body"] == dict(body)


async def test_a_body_that_contains_itself_is_refused_by_name(
    conn: aiosqlite.Connection, probe: Any
) -> None:
    looped: dict[str, Any] = {"ok": 1}
    looped["again"] = [looped]
    with pytest.raises(InvalidDispatch, match="body: is not JSON-serialisable: it contains itself"):
        await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d", body=looped)
    assert await probe.count() == 0


async def test_ack_required_row_has_a_token_in_its_payload_only_internally(
    conn: aiosqlite.Connection, probe: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="d", ack_required=True, max_attempts=3
    )
    row = await probe.row(dispatch_id)
    assert row["ack_required"] == 1 and row["max_attempts"] == 3
    assert len(row["ack_token"]) == 32
    assert json.loads(row["payload"])["ack_token"] == row["ack_token"]
    public = await studio_outbox.get_dispatch(conn, dispatch_id)
    assert public is not None
    assert "ack_token" not in public and "ack_token" not in public["payload"]
    assert public["ack_required"] is True


async def test_dedup_returns_existing_id_and_writes_nothing(
    conn: aiosqlite.Connection, probe: Any
) -> None:
    first = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="a", dedup_key="once")
    before = await probe.snapshot()
    again = await studio_outbox.enqueue_dispatch(
        conn, kind="other", deliver_to="b", body={"x": 1}, dedup_key="once"
    )
    assert again == first
    assert await probe.snapshot() == before
    other = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="a", dedup_key="two")
    assert other != first
    # Rows without a key never collide.
    a = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="a")
    b = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="a")
    assert a != b


async def test_dedup_holds_whatever_the_existing_rows_status(
    conn: aiosqlite.Connection, probe: Any
) -> None:
    first = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="a", dedup_key="z")
    await probe.set(first, status="dead_letter")
    assert (
        await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="a", dedup_key="z") == first
    )


async def test_dispatch_id_for_dedup_key_names_the_row_whatever_its_status(
    conn: aiosqlite.Connection, probe: Any
) -> None:
    assert await studio_outbox.dispatch_id_for_dedup_key(conn, "k1") is None
    first = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="a", dedup_key="k1")
    await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="a", dedup_key="k2")
    assert await studio_outbox.dispatch_id_for_dedup_key(conn, "k1") == first
    await probe.set(first, status="dead_letter")
    assert await studio_outbox.dispatch_id_for_dedup_key(conn, "k1") == first
    assert await studio_outbox.dispatch_id_for_dedup_key(conn, "k3") is None


async def test_caller_transaction_commit_and_rollback(
    db_path: Path, conn: aiosqlite.Connection, probe: Any
) -> None:
    await conn.execute("CREATE TABLE orders (id TEXT PRIMARY KEY)")
    # Rolled back together with the producer's own change.
    await conn.execute("BEGIN IMMEDIATE")
    await conn.execute("INSERT INTO orders VALUES ('o1')")
    lost = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d", dedup_key="o1")
    assert conn.in_transaction  # the outbox did not commit the caller's transaction
    await conn.rollback()
    assert await probe.count() == 0
    assert await probe.count("status_transitions") == 0
    assert await probe.count("orders") == 0
    # Committed together: another connection sees nothing until the caller commits.
    await conn.execute("BEGIN")
    await conn.execute("INSERT INTO orders VALUES ('o1')")
    kept = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d", dedup_key="o1")
    assert kept != lost
    async with studio_state.connect(db_path) as other:
        assert await studio_outbox.get_dispatch(other, kept) is None
        await conn.commit()
        got = await studio_outbox.get_dispatch(other, kept)
        assert got is not None and got["status"] == "pending"
        reasons = await other.execute_fetchall(
            "SELECT reason_code FROM status_transitions WHERE entity_id = ?", (kept,)
        )
        assert [r["reason_code"] for r in reasons] == ["dispatch.pending.enqueued"]


_CHILD_ENQUEUE = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    import studio_state, studio_outbox
    db, go, keys = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    async def main():
        async with studio_state.connect(db) as conn:
            await studio_outbox.ensure_schema(conn)
            print("ready", flush=True)
            while not os.path.exists(go):
                time.sleep(0.001)
            ids = {}
            for key in keys:
                ids[key] = await studio_outbox.enqueue_dispatch(
                    conn, kind="k", deliver_to=str(os.getpid()), dedup_key=key)
            print(json.dumps(ids), flush=True)
    asyncio.run(main())
    """
)


async def _child(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CHILD_ENQUEUE,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_dedup_across_two_processes_at_the_same_moment(
    db_path: Path, tmp_path: Path, conn: aiosqlite.Connection, probe: Any
) -> None:
    keys = [f"key-{i}" for i in range(40)]
    go = tmp_path / "go"
    children = [
        await _child(str(db_path), str(go), json.dumps(keys)),
        await _child(str(db_path), str(go), json.dumps(keys[::-1])),
    ]
    for child in children:
        assert child.stdout is not None
        assert (await asyncio.wait_for(child.stdout.readline(), 60)).strip() == b"ready"
    go.touch()
    results = []
    for child in children:
        out, err = await asyncio.wait_for(child.communicate(), 60)
        assert child.returncode == 0, err.decode()
        results.append(json.loads(out))
    assert results[0] == results[1]  # both callers got the one row's id for every key
    assert await probe.count() == len(keys)
    assert await probe.count("status_transitions") == len(keys)
    rows = await conn.execute_fetchall("SELECT id, dedup_key FROM dispatch_outbox")
    assert {r["dedup_key"]: r["id"] for r in rows} == results[0]


async def test_concurrent_enqueue_waits_for_the_callers_open_transaction(
    db_path: Path, tmp_path: Path, conn: aiosqlite.Connection, probe: Any
) -> None:
    go = tmp_path / "go"
    go.touch()
    await conn.execute("BEGIN IMMEDIATE")
    mine = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d", dedup_key="x")
    child = await _child(str(db_path), str(go), json.dumps(["x"]))
    assert child.stdout is not None
    assert (await asyncio.wait_for(child.stdout.readline(), 60)).strip() == b"ready"
    await asyncio.sleep(0.3)  # the child is now waiting for the write lock
    await conn.commit()
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode == 0, err.decode()
    assert json.loads(out) == {"x": mine}
    assert await probe.count() == 1


async def test_tasks_sharing_one_connection_dedup(conn: aiosqlite.Connection, probe: Any) -> None:
    ids = await asyncio.gather(
        *(
            studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d", dedup_key="same")
            for _ in range(10)
        )
    )
    assert len(set(ids)) == 1
    assert await probe.count() == 1


class _NotJson:
    pass


_circular: dict[str, Any] = {}
_circular["self"] = _circular


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("kind", {"kind": ""}),
        ("kind", {"kind": "   "}),
        ("kind", {"kind": None}),
        ("kind", {"kind": 3}),
        ("deliver_to", {"deliver_to": ""}),
        ("deliver_to", {"deliver_to": "a\x00b"}),
        ("deliver_to", {"deliver_to": "\ud800"}),
        ("max_attempts", {"max_attempts": 0}),
        ("max_attempts", {"max_attempts": -1}),
        ("max_attempts", {"max_attempts": 2.5}),
        ("max_attempts", {"max_attempts": True}),
        ("body", {"body": {"x": _NotJson()}}),
        ("body", {"body": {"x": math.nan}}),
        ("body", {"body": _circular}),
        ("body", {"body": [1, 2]}),
        ("body", {"body": {"x": {1, 2}}}),
        ("expires_at", {"expires_at": math.inf}),
        ("expires_at", {"expires_at": -math.inf}),
        ("expires_at", {"expires_at": math.nan}),
        ("expires_at", {"expires_at": "tomorrow"}),
        ("expires_at", {"expires_at": True}),
        ("dedup_key", {"dedup_key": ""}),
        ("dedup_key", {"dedup_key": 5}),
        ("ack_required", {"ack_required": "yes"}),
        ("session_id", {"session_id": 12}),
    ],
)
async def test_bad_arguments_raise_invalid_dispatch_and_write_nothing(
    conn: aiosqlite.Connection, probe: Any, field: str, kwargs: dict[str, Any]
) -> None:
    args: dict[str, Any] = {"kind": "k", "deliver_to": "d"}
    args.update(kwargs)
    with pytest.raises(InvalidDispatch) as caught:
        await studio_outbox.enqueue_dispatch(conn, **args)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert isinstance(caught.value, ValueError)
    assert await probe.count() == 0
    assert await probe.count("status_transitions") == 0


async def test_bad_arguments_inside_a_caller_transaction_leave_it_usable(
    conn: aiosqlite.Connection, probe: Any
) -> None:
    await conn.execute("BEGIN")
    with pytest.raises(InvalidDispatch):
        await studio_outbox.enqueue_dispatch(conn, kind="", deliver_to="d")
    ok = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d")
    await conn.commit()
    assert (await probe.row(ok))["status"] == "pending"
    assert await probe.count() == 1


async def test_enqueue_many_is_atomic_and_dedups(conn: aiosqlite.Connection, probe: Any) -> None:
    existing = await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="d", dedup_key="old")
    items: list[dict[str, Any]] = [
        {"kind": "k", "deliver_to": f"d{i}", "body": {"i": i}} for i in range(450)
    ]
    items += [
        {"kind": "k", "deliver_to": "x", "dedup_key": "old"},
        {"kind": "k", "deliver_to": "x", "dedup_key": "new"},
        {"kind": "k", "deliver_to": "y", "dedup_key": "new"},
    ]
    ids = await studio_outbox.enqueue_many(conn, items)
    assert len(ids) == len(items)
    assert len(set(ids[:450])) == 450
    assert ids[450] == existing
    assert ids[451] == ids[452] != existing
    assert await probe.count() == 452
    assert await probe.count("status_transitions") == 452
    for i in (0, 200, 449):
        payload = (await studio_outbox.get_dispatch(conn, ids[i]) or {})["payload"]
        assert payload["body"] == {"i": i} and payload["dispatch_id"] == ids[i]
    with pytest.raises(InvalidDispatch) as caught:
        await studio_outbox.enqueue_many(
            conn, [{"kind": "k", "deliver_to": "ok"}, {"kind": "k", "deliver_to": ""}]
        )
    assert caught.value.field == "items[1].deliver_to"
    with pytest.raises(InvalidDispatch, match="items\\[0\\].colour"):
        await studio_outbox.enqueue_many(conn, [{"kind": "k", "deliver_to": "d", "colour": 1}])
    assert await probe.count() == 452
    assert await studio_outbox.enqueue_many(conn, []) == []
