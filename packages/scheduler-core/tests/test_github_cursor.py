"""The github_poll cursor, settable (DESIGN §11.2): a reset replays the backlog, a later cursor
skips it; against the loopback fake GitHub."""

from __future__ import annotations

import sys

import pytest

from studio_scheduler_core import ScheduleNotFound, ScheduleValidationError, set_github_cursor
from studio_state import fetch_all

GITHUB_SERVER_MODULE = "studio_scheduler_core_test_github_server"
gh = sys.modules[GITHUB_SERVER_MODULE]  # loaded once by conftest.py, with the `github` fixture
REPO = gh.REPO


@pytest.fixture
async def engine(make_engine, clock, github):
    return await make_engine(clock=clock, github_api_url=github.url, github_token="t0ken")


async def test_reset_replays_the_backlog_and_a_later_cursor_skips_it(
    engine, clock, github, h
) -> None:
    t = h.T0
    for number in (1, 2, 3):
        github.add_pr(REPO, number, updated=t - 400 + 100 * number)
    created = await engine.service.create(gh.github_schedule("prs"))
    await gh.poll(engine)
    assert gh.numbers(await gh.fired(engine.conn, created.id)) == [1, 2, 3]

    reset = await set_github_cursor(engine.conn, created.id, None, now=clock(), actor="ops")
    assert reset.github_cursor is None
    (change,) = [
        t
        for t in await h.transitions_of(engine.conn, created.id)
        if t.reason_code == "schedule.updated.operator"
    ]
    assert change.actor == "ops"
    clock.advance(60)
    await gh.poll(engine)  # the ETag went with the cursor: a full listing, replayed
    assert gh.numbers(await gh.fired(engine.conn, created.id)) == [1, 2, 3, 1, 2, 3]

    # A cursor past PR 2 skips 1 and 2 on the next replay.
    await set_github_cursor(engine.conn, created.id, None, now=clock(), actor="ops")
    skip_to = f"{gh.iso(t - 200)}#2"
    moved = await set_github_cursor(engine.conn, created.id, skip_to, now=clock(), actor="ops")
    assert moved.github_cursor == f"{gh.iso(t - 200)}#0000000002"
    clock.advance(60)
    await gh.poll(engine)
    assert gh.numbers(await gh.fired(engine.conn, created.id)) == [1, 2, 3, 1, 2, 3, 3]


async def test_cursor_refusals_write_nothing(engine, clock, h) -> None:
    interval = await engine.service.create(h.command_schedule(h.env_dump))
    with pytest.raises(ScheduleValidationError) as caught:
        await set_github_cursor(engine.conn, interval.id, None, now=clock(), actor="ops")
    assert caught.value.field == "github_cursor"
    github = await engine.service.create(gh.github_schedule("prs"))
    with pytest.raises(ScheduleValidationError) as caught:
        await set_github_cursor(engine.conn, github.id, "yesterday", now=clock(), actor="ops")
    assert caught.value.field == "github_cursor"
    with pytest.raises(ScheduleNotFound):
        await set_github_cursor(engine.conn, "nope", None, now=clock(), actor="ops")
    rows = await fetch_all(
        engine.conn,
        "SELECT id FROM status_transitions WHERE reason_code = 'schedule.updated.operator'",
    )
    assert rows == []
