"""GitHub client, scan and event rules against the loopback fake GitHub (no engine)."""

from __future__ import annotations

import sys

import pytest

from studio_scheduler_core._github.client import GithubClient, retry_at
from studio_scheduler_core._github.events import (
    collect,
    format_cursor,
    matches,
    parse_cursor,
    query_params,
    to_event,
)
from studio_scheduler_core._github.scan import scan

GITHUB_SERVER_MODULE = "studio_scheduler_core_test_github_server"
gh = sys.modules[GITHUB_SERVER_MODULE]  # loaded once by conftest.py, with the `github` fixture
T0 = 1_700_000_000.0
REPO = "acme/widgets"


@pytest.fixture
async def client(github):
    c = GithubClient(api_url=github.url, token="s3cret")
    yield c
    await c.aclose()


def test_cursor_round_trip_and_bare_timestamp() -> None:
    key = ("2024-01-02T03:04:05Z", 42)
    assert format_cursor(key) == "2024-01-02T03:04:05Z#0000000042"
    assert parse_cursor(format_cursor(key)) == key
    assert parse_cursor("2024-01-02T03:04:05Z") == ("2024-01-02T03:04:05Z", 9_999_999_999)
    assert parse_cursor(None) is None
    with pytest.raises(ValueError):
        parse_cursor("garbage#1")
    with pytest.raises(ValueError):
        parse_cursor("2024-01-02T03:04:05Z#-3")


def test_query_params_per_event() -> None:
    assert query_params(None) == {
        "state": "open",
        "sort": "updated",
        "direction": "desc",
        "per_page": "100",
    }
    assert query_params({"event": "pr_merged"})["state"] == "closed"
    assert query_params({"event": "pr_closed", "state": "all"})["state"] == "closed"
    assert query_params({"state": "all", "base": "dev"}) | {} == {
        "state": "all",
        "sort": "updated",
        "direction": "desc",
        "per_page": "100",
        "base": "dev",
    }


def test_event_keys_and_filters(github) -> None:
    pr = github.add_pr(REPO, 7, created=T0, updated=T0 + 50, merged=T0 + 20, closed=T0 + 20)
    assert to_event(pr, event="pr_updated", repo=REPO, github_filter=None).key[0] == gh.iso(T0 + 50)
    assert to_event(pr, event="pr_opened", repo=REPO, github_filter=None).key[0] == gh.iso(T0)
    assert to_event(pr, event="pr_merged", repo=REPO, github_filter=None).key[0] == gh.iso(T0 + 20)
    assert to_event(pr, event="pr_closed", repo=REPO, github_filter=None) is None  # merged
    fields = to_event(pr, event="pr_merged", repo=REPO, github_filter=None).fields
    assert fields["pr_number"] == 7 and fields["pr_title"] == "PR 7"
    assert fields["pr_merged_at"] == gh.iso(T0 + 20) and fields["is_same_repo"] is True
    fork = github.add_pr(REPO, 8, updated=T0, fork=True, draft=True)
    assert not matches(fork, {"same_repo_only": True}, REPO)
    assert matches(fork, {"same_repo_only": False}, REPO)
    assert not matches(fork, {"draft": False}, REPO)
    assert matches(fork, {"draft": True}, REPO)
    assert not matches(fork, {"base": "dev"}, REPO)
    # The same PR met twice while pages shift keeps its newest version.
    newer = dict(pr, updated_at=gh.iso(T0 + 99))
    events = collect([newer, pr], event="pr_updated", repo=REPO, github_filter=None)
    assert events[7].updated_at == gh.iso(T0 + 99)


async def test_headers_token_and_etag_304(github, client) -> None:
    github.add_pr(REPO, 1, updated=T0)
    page = await client.get_pulls(client.pulls_url(REPO), params=query_params(None), now=T0)
    assert page.status == "ok" and [p["number"] for p in page.pulls] == [1]
    assert page.etag
    again = await client.get_pulls(
        client.pulls_url(REPO), params=query_params(None), etag=page.etag, now=T0
    )
    assert again.status == "not_modified"
    first, second = github.pull_requests()
    assert first.headers["authorization"] == "Bearer s3cret"
    assert first.headers["accept"] == "application/vnd.github+json"
    assert first.query == query_params(None)
    assert "if-none-match" not in first.headers
    assert second.headers["if-none-match"] == page.etag


@pytest.mark.parametrize(
    ("status", "headers", "expected", "retry"),
    [
        (401, {}, "auth", None),
        (
            403,
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(T0) + 900)},
            "rate_limited",
            T0 + 900,
        ),
        (403, {"retry-after": "120"}, "rate_limited", T0 + 120),
        (429, {"retry-after": "30"}, "rate_limited", T0 + 30),
        (429, {}, "rate_limited", T0 + 60),
        (
            403,
            {"x-ratelimit-remaining": "42", "x-ratelimit-reset": str(int(T0) + 900)},
            "error",
            None,
        ),
        (500, {}, "error", None),
    ],
)
async def test_status_classification(github, client, status, headers, expected, retry) -> None:
    github.fail_next(status, headers)
    page = await client.get_pulls(client.pulls_url(REPO), params={}, now=T0)
    assert page.status == expected
    assert page.retry_at == retry


def test_retry_after_http_date() -> None:
    assert retry_at({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=0) == 1445412480.0
    assert retry_at({"x-ratelimit-reset": "nope"}, now=0) is None


async def test_transport_error_is_an_error_page() -> None:
    c = GithubClient(api_url="http://127.0.0.1:9", token=None, timeout=2.0)
    try:
        page = await c.get_pulls(c.pulls_url(REPO), params={}, now=T0)
    finally:
        await c.aclose()
    assert page.status == "error" and page.detail


async def test_link_off_origin_is_not_followed(github, client) -> None:
    # A Link to another host would carry the token away: it is dropped.
    github.scripted.append((200, {"Link": '<http://evil.example/steal?page=2>; rel="next"'}, []))
    page = await client.get_pulls(client.pulls_url(REPO), params={}, now=T0)
    assert page.status == "ok" and page.next_url is None


async def test_scan_follows_pages_until_past_the_cursor(github, client) -> None:
    for n in range(1, 251):
        github.add_pr(REPO, n, updated=T0 + n)
    cursor = (gh.iso(T0 + 20), 20)
    result = await scan(
        client,
        repo=REPO,
        github_filter=None,
        cursor=cursor,
        etag=None,
        fingerprint="fp",
        deep=None,
        now=T0,
    )
    assert result.status == "ok" and result.pages == 3 and result.deep is None
    assert [e.number for e in result.events] == list(range(21, 251))
    # Stops as soon as a page reaches the cursor: a cursor on page 1 reads one page.
    github.clear_requests()
    result = await scan(
        client,
        repo=REPO,
        github_filter=None,
        cursor=(gh.iso(T0 + 200), 200),
        etag=None,
        fingerprint="fp",
        deep=None,
        now=T0,
    )
    assert result.pages == 1 and len(github.pull_requests()) == 1
    assert [e.number for e in result.events] == list(range(201, 251))


async def test_partial_scan_is_carried_over_and_skips_nothing(github, client) -> None:
    for n in range(1, 751):
        github.add_pr(REPO, n, updated=T0 + n)
    cursor = (gh.iso(T0 + 10), 10)
    first = await scan(
        client,
        repo=REPO,
        github_filter=None,
        cursor=cursor,
        etag=None,
        fingerprint="fp",
        deep=None,
        now=T0,
    )
    assert first.status == "ok" and first.pages == 5
    assert first.events is None and first.deep is not None  # nothing fired from a partial scan
    # Meanwhile two PRs change: page 1 is re-read, so they are not missed.
    github.update_pr(REPO, 5, updated=T0 + 1000)
    github.add_pr(REPO, 751, updated=T0 + 1001)
    second = await scan(
        client,
        repo=REPO,
        github_filter=None,
        cursor=cursor,
        etag=None,
        fingerprint="fp",
        deep=first.deep,
        now=T0,
    )
    assert second.status == "ok" and second.deep is None
    numbers = [e.number for e in second.events]
    assert sorted(numbers) == sorted({*range(11, 752), 5})
    assert len(numbers) == len(set(numbers))
    keys = [e.key for e in second.events]
    assert keys == sorted(keys)


async def test_first_poll_without_cursor_takes_five_pages_as_baseline(github, client) -> None:
    for n in range(1, 601):
        github.add_pr(REPO, n, updated=T0 + n)
    result = await scan(
        client,
        repo=REPO,
        github_filter=None,
        cursor=None,
        etag=None,
        fingerprint="fp",
        deep=None,
        now=T0,
    )
    assert result.pages == 5 and result.baseline
    assert [e.number for e in result.events] == list(range(101, 601))


async def test_page_error_fails_the_whole_scan(github, client) -> None:
    for n in range(1, 151):
        github.add_pr(REPO, n, updated=T0 + n)
    # The first page answers normally, the second with a 401.
    orig = github.answer

    def answer(path, query, headers):
        if query.get("page") == "2":
            github.fail_next(401)
        return orig(path, query, headers)

    github.answer = answer
    result = await scan(
        client,
        repo=REPO,
        github_filter=None,
        cursor=(gh.iso(T0), 0),
        etag=None,
        fingerprint="fp",
        deep=None,
        now=T0,
    )
    assert result.status == "auth" and result.events is None and result.deep is None
