"""The github_poll trigger source: background polls, one fire per PR event.

A due row starts a poll in a background task (a slow GitHub never holds up the tick) and its
``next_fire_at`` moves on to the next poll at once, guarded on the due value. A poll that finds
events holds them in memory as a batch and makes the row due again (then wakes the engine);
the engine then takes the batch's events one occurrence each, oldest first, through every
admission gate. Each occurrence's transaction writes the cursor past its event (guarded on the
previous cursor, so an event is never fired twice) and the last one also writes the ETag and
the next poll time. A refused occurrence (capacity, overlap, a pending budget) leaves the rest
of the batch held for the next pass, re-offered without polling again; after a restart the
batch is found again because the cursor and the ETag were not moved past it.

Health: 200/304 stamp ``last_healthy_poll_at`` and reset ``poller_consecutive_401``; a 401
counts, and the fifth consecutive one disables the schedule (``schedule.disabled.github_auth``).
403/429 rate limits postpone this poll and every poll on the same token until GitHub's reset,
logged once per episode.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiosqlite

from .._records.codec import ColumnValue
from .._records.schedule import Schedule
from .._settings import SchedulerSettings
from .._triggers.cadence import interval_next, poll_interval
from ..abc import Occurrence
from .client import GithubClient
from .events import (
    Key,
    PullEvent,
    event_name,
    fingerprint,
    format_cursor,
    parse_cursor,
)
from .scan import MAX_PAGES, DeepScan, ScanResult, scan
from .store import arm, count_401, move_next, quiet, stamp_healthy

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger("studio_scheduler_core")

MAX_POSTPONE_SECONDS = 3600.0


@dataclass
class HeldBatch:
    """Events of one poll not fired yet; valid while the row stays due at ``due_at``."""

    fingerprint: str
    due_at: float
    start_cursor: Key | None
    events: list[PullEvent]
    etag: str | None

    @property
    def final_cursor(self) -> Key:
        """The key of the batch's newest event (the cursor once the batch is done)."""
        return self.events[-1].key


class GithubPollSource:
    """``TriggerSource`` of ``github_poll`` rows (one per engine; owns the HTTP client)."""

    trigger_type = "github_poll"
    missed_fire_applies = False

    def __init__(
        self,
        settings: SchedulerSettings,
        *,
        wake: Callable[[], None] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.client = GithubClient(
            api_url=settings.github_api_url, token=settings.github_token, transport=transport
        )
        self._wake = wake
        self._held: dict[str, HeldBatch] = {}
        self._deep: dict[str, DeepScan] = {}
        self._polls: dict[str, asyncio.Task[None]] = {}
        self._limited_until: float | None = None
        self._limit_logged = False
        self._failing: set[str] = set()

    # -- TriggerSource ----------------------------------------------------------------------
    def next_fire_at(
        self, schedule: Schedule, *, due: float | None, now: float, timezone: str
    ) -> float:
        """The next poll: the first ``due + k*poll_interval`` after now (no drift)."""
        return interval_next(now if due is None else due, poll_interval(schedule), now)

    async def occurrences(
        self, conn: aiosqlite.Connection, schedule: Schedule, *, now: float, timezone: str
    ) -> list[Occurrence]:
        """The held batch's remaining events; else start a poll and offer nothing yet."""
        sid = schedule.id
        due = schedule.next_fire_at
        held = self._held.get(sid)
        if held is not None:
            offered = self._offer(held, schedule, now)
            if offered:
                return offered
            del self._held[sid]
        if due is None:
            return []
        stale = self._polls.pop(sid, None)
        if stale is not None and not stale.done():
            stale.cancel()  # it polled for an older state of this row
        if self._limited_until is not None and self._limited_until > now:
            await move_next(conn, sid, expect=due, to=self._limited_until, now=now)
            return []
        nxt = self.next_fire_at(schedule, due=due, now=now, timezone=timezone)
        if not await move_next(conn, sid, expect=due, to=nxt, now=now):
            return []
        task = asyncio.create_task(
            self._poll(conn, schedule, planned=nxt, now=now), name=f"github-poll-{sid}"
        )
        self._polls[sid] = task
        task.add_done_callback(lambda t: self._poll_done(sid, t))
        return []

    # -- lifecycle --------------------------------------------------------------------------
    async def wait_polls(self) -> None:
        """Wait until no poll is running (tests; the engine never waits for polls)."""
        while pending := [t for t in self._polls.values() if not t.done()]:
            await asyncio.gather(*pending, return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel running polls and close the HTTP client (engine shutdown)."""
        tasks = [t for t in self._polls.values() if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._polls.clear()
        await self.client.aclose()

    def _poll_done(self, sid: str, task: asyncio.Task[None]) -> None:
        if self._polls.get(sid) is task:
            del self._polls[sid]
        if not task.cancelled() and task.exception() is not None:
            logger.error("github poll of schedule %s failed", sid, exc_info=task.exception())

    # -- the held batch ---------------------------------------------------------------------
    def _offer(self, held: HeldBatch, schedule: Schedule, now: float) -> list[Occurrence] | None:
        repo = str(schedule.github_repo or "")
        if held.fingerprint != fingerprint(repo, schedule.github_filter):
            return None
        if schedule.next_fire_at != held.due_at:
            return None
        stored = schedule.github_cursor
        try:
            cursor = parse_cursor(stored)
        except ValueError:
            return None
        if cursor is not None and (
            cursor >= held.final_cursor
            or (held.start_cursor is not None and cursor < held.start_cursor)
        ):
            return None
        if cursor is None and held.start_cursor is not None:
            return None
        remaining = [e for e in held.events if cursor is None or e.key > cursor]
        fireable = [e for e in remaining if e.dispatchable]
        if not fireable:
            return None
        out: list[Occurrence] = []
        previous = stored
        for index, item in enumerate(fireable):
            last = index == len(fireable) - 1
            # Events filtered out between two fires are passed by the next fire's cursor;
            # the last fire also passes the filtered-out events after it.
            value = format_cursor(held.final_cursor if last else item.key)
            updates: dict[str, ColumnValue] = {"github_cursor": value}
            if last:
                updates["github_etag"] = held.etag
            out.append(
                Occurrence(
                    schedule=schedule,
                    due_at=held.due_at,
                    trigger_context={
                        "github_events": [dict(item.fields)],
                        "repo": repo,
                        "fired_at": now,
                    },
                    advance=last,
                    schedule_updates=updates,
                    guards={"github_cursor": previous},
                )
            )
            previous = value
        return out

    # -- one poll ---------------------------------------------------------------------------
    async def _poll(
        self,
        conn: aiosqlite.Connection,
        schedule: Schedule,
        *,
        planned: float,
        now: float,
    ) -> None:
        sid = schedule.id
        repo = str(schedule.github_repo or "")
        filt = schedule.github_filter
        fp = fingerprint(repo, filt)
        try:
            cursor = parse_cursor(schedule.github_cursor)
        except ValueError as exc:
            logger.error("schedule %s: unusable github_cursor, not polling: %s", sid, exc)
            return
        deep = self._deep.get(sid)
        if deep is not None and (deep.fingerprint != fp or deep.cursor != cursor):
            deep = None
            del self._deep[sid]
        result = await scan(
            self.client,
            repo=repo,
            github_filter=filt,
            cursor=cursor,
            etag=None if deep is not None else schedule.github_etag,
            fingerprint=fp,
            deep=deep,
            now=now,
        )
        if result.status in ("ok", "not_modified"):
            await stamp_healthy(conn, sid, now)
            self._failing.discard(sid)
            if self._limited_until is not None and self._limited_until <= now:
                self._limited_until, self._limit_logged = None, False
            if result.status == "ok":
                await self._found(conn, schedule, result, fp, cursor, planned=planned, now=now)
        elif result.status == "auth":
            await count_401(conn, sid, repo, now)
        elif result.status == "rate_limited":
            await self._rate_limited(conn, sid, repo, result, planned=planned, now=now)
        else:
            level = logging.DEBUG if sid in self._failing else logging.WARNING
            self._failing.add(sid)
            detail = result.page.detail if result.page is not None else ""
            logger.log(level, "github poll of %s (schedule %s) failed: %s", repo, sid, detail)

    async def _found(
        self,
        conn: aiosqlite.Connection,
        schedule: Schedule,
        result: ScanResult,
        fp: str,
        cursor: Key | None,
        *,
        planned: float,
        now: float,
    ) -> None:
        sid, repo = schedule.id, str(schedule.github_repo or "")
        if result.restarted:
            self._deep.pop(sid, None)
            logger.warning(
                "github poll of %s: more PRs changed since the last poll than one page shows; "
                "the partial scan starts over from page 1",
                repo,
            )
            return
        if result.deep is not None:
            if sid not in self._deep:
                logger.warning(
                    "github poll of %s: more than %d pages of PRs changed since the cursor; "
                    "partial scan (nothing fired, nothing skipped), continuing at the next poll",
                    repo,
                    MAX_PAGES,
                )
            self._deep[sid] = result.deep
            return
        self._deep.pop(sid, None)
        if result.baseline:
            logger.warning(
                "first github poll of %s: the %d most recently updated PRs are the baseline; "
                "older history is not replayed",
                repo,
                MAX_PAGES * 100,
            )
        events = result.events or []
        old = schedule.github_cursor
        if not any(e.dispatchable for e in events):
            new = format_cursor(events[-1].key) if events else old
            await quiet(conn, sid, planned=planned, old=old, new=new, etag=result.etag, now=now)
            return
        batch = HeldBatch(
            fingerprint=fp, due_at=now, start_cursor=cursor, events=events, etag=result.etag
        )
        if await arm(conn, sid, planned=planned, due=now, cursor=old):
            self._held[sid] = batch
            logger.info(
                "github poll of %s (schedule %s): %d event(s) to fire (%s)",
                repo,
                sid,
                sum(e.dispatchable for e in events),
                event_name(schedule.github_filter),
            )
            if self._wake is not None:
                self._wake()

    async def _rate_limited(
        self,
        conn: aiosqlite.Connection,
        sid: str,
        repo: str,
        result: ScanResult,
        *,
        planned: float,
        now: float,
    ) -> None:
        page = result.page
        retry = page.retry_at if page is not None and page.retry_at is not None else now
        until = min(max(retry, now + 1.0), now + MAX_POSTPONE_SECONDS)
        if self._limited_until is None or until > self._limited_until:
            self._limited_until = until
        if not self._limit_logged:
            self._limit_logged = True
            logger.warning(
                "GitHub rate limit (HTTP %s) polling %s; github polls postponed for %.0f s",
                page.http_status if page is not None else "?",
                repo,
                until - now,
            )
        await move_next(conn, sid, expect=planned, to=max(planned, until), now=now)
