"""github_poll through the engine against the loopback fake GitHub: events, cursor, ETag, pages."""

from __future__ import annotations

import sys

import pytest

from studio_scheduler_core import ScheduleValidationError
from studio_state import fetch_one

GITHUB_SERVER_MODULE = "studio_scheduler_core_test_github_server"
gh = sys.modules[GITHUB_SERVER_MODULE]  # loaded once by conftest.py, with the `github` fixture
REPO = gh.REPO


@pytest.fixture
async def engine(make_engine, clock, github):
    return await make_engine(clock=clock, github_api_url=github.url, github_token="t0ken")


async def _row(engine, sid):
    return await fetch_one(engine.conn, "SELECT * FROM schedules WHERE id = ?", (sid,))


async def test_first_poll_fires_each_pr_once_oldest_first_then_nothing(
    engine, clock, github, h
) -> None:
    t = h.T0
    github.add_pr(REPO, 3, updated=t - 100, title="third")
    github.add_pr(REPO, 1, updated=t - 300, title="Fix the parser")
    github.add_pr(REPO, 2, updated=t - 200, title="second")
    created = await engine.service.create(gh.github_schedule("prs"))
    await gh.poll(engine)
    runs = await gh.fired(engine.conn, created.id)
    assert gh.numbers(runs) == [1, 2, 3]
    assert {r["status"] for r in runs} == {"completed"}
    ctx = runs[0]["trigger_context"]
    assert ctx["repo"] == REPO and ctx["fired_at"] == t
    event = ctx["github_events"][0]
    assert event["event"] == "pr_updated" and event["pr_title"] == "Fix the parser"
    assert event["pr_url"].endswith("/pull/1") and event["pr_author"] == "octo"
    assert event["updated_at"] == gh.iso(t - 300) and event["head_sha"] == f"{1:040x}"
    assert event["draft"] is False and event["is_same_repo"] is True
    assert event["head_repo"] == REPO and event["pr_merged_at"] is None
    assert runs[0]["action_args"][-2:] == ["1", "Fix the parser"]  # {{pr_number}} {{pr_title}}
    row = await _row(engine, created.id)
    assert row["github_cursor"] == f"{gh.iso(t - 100)}#0000000003"
    assert row["github_etag"] and row["last_healthy_poll_at"] == t
    assert row["next_fire_at"] == t + 60 and row["last_fired_at"] == t
    request = github.pull_requests()[0]
    assert request.path == f"/repos/{REPO}/pulls"
    assert request.query == {
        "state": "open",
        "sort": "updated",
        "direction": "desc",
        "per_page": "100",
    }
    assert request.headers["authorization"] == "Bearer t0ken"

    # Second poll: If-None-Match with the stored ETag, 304, nothing fires.
    github.clear_requests()
    clock.advance(60)
    await gh.poll(engine)
    assert gh.numbers(await gh.fired(engine.conn, created.id)) == [1, 2, 3]
    (again,) = github.pull_requests()
    assert again.headers["if-none-match"] == row["github_etag"]
    row2 = await _row(engine, created.id)
    assert row2["last_healthy_poll_at"] == t + 60 and row2["next_fire_at"] == t + 120
    assert row2["github_cursor"] == row["github_cursor"]


async def test_updated_pr_fires_again_under_pr_updated_not_under_pr_opened(
    make_engine, engine, clock, github, h
) -> None:
    t = h.T0
    github.add_pr(REPO, 1, updated=t - 50)
    github.add_pr(REPO, 2, updated=t - 40)
    updated = await engine.service.create(gh.github_schedule("updated"))
    opened = await engine.service.create(
        gh.github_schedule("opened", github_filter={"event": "pr_opened"})
    )
    await gh.poll(engine)
    assert gh.numbers(await gh.fired(engine.conn, updated.id)) == [1, 2]
    assert gh.numbers(await gh.fired(engine.conn, opened.id)) == [1, 2]

    clock.advance(60)
    github.update_pr(REPO, 1, updated=t + 10)
    github.add_pr(REPO, 3, updated=t + 20, created=t + 5)
    await gh.poll(engine)
    assert gh.numbers(await gh.fired(engine.conn, updated.id)) == [1, 2, 1, 3]
    assert gh.numbers(await gh.fired(engine.conn, opened.id)) == [1, 2, 3]
    last = (await gh.fired(engine.conn, opened.id))[-1]
    assert last["trigger_context"]["github_events"][0]["event"] == "pr_opened"

    # First sight survives a restart: the cursor is the newest created_at handled.
    await engine.stop()
    clock.advance(60)
    second = await make_engine(clock=clock, github_api_url=github.url, github_token="t0ken")
    github.update_pr(REPO, 2, updated=t + 100)
    github.add_pr(REPO, 4, updated=t + 110, created=t + 105)
    await gh.poll(second)
    assert gh.numbers(await gh.fired(second.conn, opened.id)) == [1, 2, 3, 4]
    assert gh.numbers(await gh.fired(second.conn, updated.id)) == [1, 2, 1, 3, 2, 4]


async def test_merged_and_closed_events(engine, clock, github, h) -> None:
    t = h.T0
    github.add_pr(REPO, 1, updated=t - 30, state="closed", merged=t - 30, closed=t - 30)
    github.add_pr(REPO, 2, updated=t - 20, state="closed", closed=t - 20)
    github.add_pr(REPO, 3, updated=t - 10)
    merged = await engine.service.create(
        gh.github_schedule("merged", github_filter={"event": "pr_merged"})
    )
    closed = await engine.service.create(
        gh.github_schedule("closed", github_filter={"event": "pr_closed"})
    )
    await gh.poll(engine)
    merged_runs = await gh.fired(engine.conn, merged.id)
    assert gh.numbers(merged_runs) == [1]
    assert merged_runs[0]["trigger_context"]["github_events"][0]["pr_merged_at"] == gh.iso(t - 30)
    assert gh.numbers(await gh.fired(engine.conn, closed.id)) == [2]
    assert {r.query["state"] for r in github.pull_requests()} == {"closed"}

    # A comment on the merged PR is no new merge; a reopen + close is a new close.
    clock.advance(60)
    github.update_pr(REPO, 1, updated=t + 10)
    github.update_pr(REPO, 2, updated=t + 20, closed_at=t + 20)
    await gh.poll(engine)
    assert gh.numbers(await gh.fired(engine.conn, merged.id)) == [1]
    assert gh.numbers(await gh.fired(engine.conn, closed.id)) == [2, 2]


async def test_pagination_across_three_pages(engine, clock, github, h) -> None:
    t = h.T0
    github.add_pr(REPO, 1, updated=t - 1000)
    created = await engine.service.create(
        gh.github_schedule("paged", github_filter={"draft": False})
    )
    await gh.poll(engine)
    assert gh.numbers(await gh.fired(engine.conn, created.id)) == [1]
    # 250 newer PRs, all drafts but one on each page: 3 pages are read, 3 PRs fire.
    for n in range(2, 252):
        github.add_pr(REPO, n, updated=t + n, draft=n not in (10, 130, 250))
    github.clear_requests()
    clock.advance(60)
    await gh.poll(engine)
    assert gh.numbers(await gh.fired(engine.conn, created.id)) == [1, 10, 130, 250]
    pages = [r.query.get("page", "1") for r in github.pull_requests()]
    assert pages == ["1", "2", "3"]
    row = await _row(engine, created.id)
    assert row["github_cursor"] == f"{gh.iso(t + 251)}#0000000251"  # past the drafts too


async def test_draft_and_same_repo_only_filters(engine, github, h) -> None:
    t = h.T0
    github.add_pr(REPO, 1, updated=t - 30, draft=True)
    github.add_pr(REPO, 2, updated=t - 20, fork=True)
    github.add_pr(REPO, 3, updated=t - 10)
    github.add_pr(REPO, 4, updated=t - 5, base="dev")
    only = await engine.service.create(
        gh.github_schedule(
            "strict", github_filter={"draft": False, "same_repo_only": True, "base": "main"}
        )
    )
    drafts = await engine.service.create(
        gh.github_schedule("drafts", github_filter={"draft": True})
    )
    forks = await engine.service.create(
        gh.github_schedule("any-repo", github_filter={"same_repo_only": False})
    )
    await gh.poll(engine)
    assert gh.numbers(await gh.fired(engine.conn, only.id)) == [3]
    assert gh.numbers(await gh.fired(engine.conn, drafts.id)) == [1]
    assert gh.numbers(await gh.fired(engine.conn, forks.id)) == [1, 2, 3, 4]
    base_requests = [r for r in github.pull_requests() if r.query.get("base") == "main"]
    assert len(base_requests) == 1
    fork_run = (await gh.fired(engine.conn, forks.id))[1]
    event = fork_run["trigger_context"]["github_events"][0]
    assert event["is_same_repo"] is False and event["head_repo_is_fork"] is True


async def test_filter_change_forgets_the_etag(engine, clock, github, h) -> None:
    github.add_pr(REPO, 1, updated=h.T0 - 10)
    created = await engine.service.create(gh.github_schedule("etag"))
    await gh.poll(engine)
    assert (await _row(engine, created.id))["github_etag"]
    await engine.service.update(created.id, {"github_filter": {"draft": False}})
    assert (await _row(engine, created.id))["github_etag"] is None


@pytest.mark.parametrize(
    ("github_filter", "field"),
    [
        ({"label": "x"}, "github_filter.label"),
        ({"state": "draft"}, "github_filter.state"),
        ({"draft": "yes"}, "github_filter.draft"),
        ({"same_repo_only": 1}, "github_filter.same_repo_only"),
        ({"event": "pr_reviewed"}, "github_filter.event"),
        ({"base": "bad branch"}, "github_filter.base"),
        ({"event": "pr_merged", "state": "open"}, "github_filter.state"),
    ],
)
async def test_bad_filters_are_refused_and_nothing_written(engine, github_filter, field) -> None:
    with pytest.raises(ScheduleValidationError) as info:
        await engine.service.create(gh.github_schedule("bad", github_filter=github_filter))
    assert info.value.field == field
    assert (await engine.service.list())[1] == 0


async def test_threshold_config_refused_on_github_poll(engine) -> None:
    config = {"metric": "failed_runs", "op": "gt", "value": 1, "window_minutes": 5}
    with pytest.raises(ScheduleValidationError) as info:
        await engine.service.create(gh.github_schedule("thr", threshold_config=config))
    assert info.value.field == "threshold_config"


async def test_stop_closes_the_http_client(engine, github, h) -> None:
    github.add_pr(REPO, 1, updated=h.T0 - 10)
    await engine.service.create(gh.github_schedule("close"))
    await gh.poll(engine)
    source = engine.registry.get("github_poll")
    assert source.client._client is not None
    await engine.stop()
    assert source.client._client is None


async def test_running_loop_polls_in_the_background_and_fires(make_engine, github, h) -> None:
    # Real clock and the real loop: the poll's completion wakes the engine for the fires.
    import time

    github.add_pr(REPO, 1, updated=time.time() - 60)
    engine = await make_engine(loop=True, github_api_url=github.url, tick_seconds=30.0)
    created = await engine.service.create(gh.github_schedule("live"))

    async def one_run() -> bool:
        runs = await gh.fired(engine.conn, created.id)
        return len(runs) == 1 and runs[0]["status"] == "completed"

    await h.eventually(one_run)
