"""One github_poll scan: the pulls listing from page 1 down to the cursor, at most 5 pages a poll.

A scan that reaches the cursor (or the end of the listing) within 5 pages is complete: every
event newer than the cursor is in it. One that does not is partial and is never fired as it
stands, since the events it did not fetch are the oldest ones and the cursor would step over
them. It is carried over as a :class:`DeepScan`: the next poll re-reads page 1 (to catch PRs
that changed meanwhile) and follows the stored ``Link: rel="next"`` for up to 4 more pages,
until the scan reaches the cursor; then every event collected fires, oldest first. A
schedule's first poll (no cursor yet) has nothing to reach: what 5 pages hold (the 500 most
recently updated PRs) is its baseline, and older history is not replayed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .client import GithubClient, Page, PageStatus
from .events import (
    Key,
    PullEvent,
    after_cursor,
    collect,
    event_name,
    newest_updated,
    oldest_updated,
    query_params,
    reached,
)

logger = logging.getLogger("studio_scheduler_core")

MAX_PAGES = 5
PER_PAGE = 100


@dataclass(frozen=True)
class _Listing:
    """What turns a page of the listing into events: the event kind, repo and filter."""

    event: str
    repo: str
    github_filter: Mapping[str, Any] | None

    def collect(
        self, pulls: Sequence[Mapping[str, Any]], into: dict[int, PullEvent] | None = None
    ) -> dict[int, PullEvent]:
        return collect(
            pulls, event=self.event, repo=self.repo, github_filter=self.github_filter, into=into
        )


@dataclass
class DeepScan:
    """A partial scan carried over to the next poll (memory only: a restart scans anew)."""

    fingerprint: str
    cursor: Key | None
    next_url: str
    events: dict[int, PullEvent]
    top_seen: str | None
    pages: int


@dataclass
class ScanResult:
    """What a poll found: ``events`` (complete scan), or ``deep`` (carried over), or neither."""

    status: PageStatus
    page: Page | None = None
    events: list[PullEvent] | None = None
    etag: str | None = None
    deep: DeepScan | None = None
    pages: int = 0
    baseline: bool = False
    restarted: bool = False


def _failed(page: Page, pages: int, deep: DeepScan | None = None) -> ScanResult:
    return ScanResult(page.status, page=page, pages=pages, deep=deep)


async def scan(
    client: GithubClient,
    *,
    repo: str,
    github_filter: Mapping[str, Any] | None,
    cursor: Key | None,
    etag: str | None,
    fingerprint: str,
    deep: DeepScan | None,
    now: float,
) -> ScanResult:
    """Read the listing for one poll (see the module docstring for the rules)."""
    event = event_name(github_filter)
    listing = _Listing(event, repo, github_filter)
    url = client.pulls_url(repo)
    params = query_params(github_filter)
    if deep is not None:
        return await _resume(client, deep, url=url, params=params, listing=listing, now=now)
    first = await client.get_pulls(url, params=params, etag=etag, now=now)
    if first.status != "ok":
        return _failed(first, 1)
    events = listing.collect(first.pulls)
    pages, last = 1, first
    while not reached(last.pulls, cursor) and last.next_url and pages < MAX_PAGES:
        page = await client.get_pulls(last.next_url, now=now)
        if page.status != "ok":
            return _failed(page, pages + 1)
        listing.collect(page.pulls, into=events)
        pages, last = pages + 1, page
    complete = reached(last.pulls, cursor) or not last.next_url
    if complete or cursor is None:
        return ScanResult(
            "ok",
            events=after_cursor(events.values(), cursor),
            etag=first.etag,
            pages=pages,
            baseline=not complete,
        )
    assert last.next_url is not None
    carried = DeepScan(
        fingerprint=fingerprint,
        cursor=cursor,
        next_url=last.next_url,
        events=events,
        top_seen=newest_updated(first.pulls),
        pages=pages,
    )
    return ScanResult("ok", deep=carried, etag=first.etag, pages=pages)


async def _resume(
    client: GithubClient,
    deep: DeepScan,
    *,
    url: str,
    params: Mapping[str, str],
    listing: _Listing,
    now: float,
) -> ScanResult:
    first = await client.get_pulls(url, params=params, now=now)
    if first.status != "ok":
        return _failed(first, 1, deep)
    oldest = oldest_updated(first.pulls)
    if (
        len(first.pulls) >= PER_PAGE
        and first.next_url
        and deep.top_seen is not None
        and oldest is not None
        and oldest > deep.top_seen
    ):
        # More PRs changed since the last poll than page 1 holds: one that moved up from the
        # unread part would be missed, so the scan starts over from page 1.
        return ScanResult("ok", pages=1, restarted=True)
    events = dict(deep.events)
    listing.collect(first.pulls, into=events)
    next_url: str | None = deep.next_url
    pages, done = 1, False
    while pages < MAX_PAGES and next_url:
        page = await client.get_pulls(next_url, now=now)
        if page.status != "ok":
            return _failed(page, pages + 1, deep)
        listing.collect(page.pulls, into=events)
        pages, next_url = pages + 1, page.next_url
        if reached(page.pulls, deep.cursor):
            done = True
            break
    if done or not next_url:
        return ScanResult(
            "ok", events=after_cursor(events.values(), deep.cursor), etag=first.etag, pages=pages
        )
    carried = DeepScan(
        fingerprint=deep.fingerprint,
        cursor=deep.cursor,
        next_url=next_url,
        events=events,
        top_seen=newest_updated(first.pulls),
        pages=deep.pages + pages - 1,
    )
    return ScanResult("ok", deep=carried, etag=first.etag, pages=pages)
