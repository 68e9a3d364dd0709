"""github_poll events: filter → query, pull request → event, the cursor, and batch order.

Each ``github_filter.event`` names the timestamp that makes a pull request an event of that
kind: ``pr_updated`` its ``updated_at`` (a new or updated PR), ``pr_opened`` its ``created_at``
(first sight: each PR is opened once), ``pr_merged`` its ``merged_at``, ``pr_closed`` its
``closed_at`` when it was closed without a merge. An event's key is ``(timestamp, number)``; the
cursor ``timestamp#number`` (``updated_at#number`` for the default event) is the
key of the newest event handled, so a key at or before the cursor is never fired again, and
the key never changes for an event that already happened (a merged PR that is commented on
later does not merge again). Every event time is at or before the PR's ``updated_at``, so a
scan of the ``sort=updated`` listing down to the cursor's timestamp sees every newer event.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

DEFAULT_EVENT = "pr_updated"
MAX_CURSOR_NUMBER = 9_999_999_999
_TS_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

Key = tuple[str, int]
"""``(timestamp "YYYY-MM-DDTHH:MM:SSZ", PR number)``: compared as a tuple."""


def normalize_ts(value: Any) -> str | None:
    """An ISO-8601 timestamp as ``YYYY-MM-DDTHH:MM:SSZ`` in UTC, or ``None`` if unusable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        # year 9999 at -12:00 (or year 1 at +12:00) is beyond datetime's range in UTC
        return parsed.astimezone(UTC).strftime(_TS_FORMAT)
    except (ValueError, OverflowError):
        return None


def parse_cursor(value: Any) -> Key | None:
    """The stored cursor as a key; a bare timestamp means its whole second is consumed.

    Raises ``ValueError`` for a value that is neither empty nor a cursor.
    """
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"github_cursor must be text, got {type(value).__name__}")
    stamp, sep, number = value.partition("#")
    ts = normalize_ts(stamp)
    if ts is None:
        raise ValueError(f"github_cursor {value!r} does not start with a timestamp")
    if not sep:
        return (ts, MAX_CURSOR_NUMBER)
    if not number.isdigit():
        raise ValueError(f"github_cursor {value!r} has no PR number after '#'")
    return (ts, min(int(number), MAX_CURSOR_NUMBER))


def format_cursor(key: Key) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ#0000000042`` (10-digit number: the text sorts like the key)."""
    ts, number = key
    return f"{ts}#{max(0, min(int(number), MAX_CURSOR_NUMBER)):010d}"


def event_name(github_filter: Mapping[str, Any] | None) -> str:
    """The filter's event (default ``pr_updated``)."""
    return str((github_filter or {}).get("event") or DEFAULT_EVENT)


def query_params(github_filter: Mapping[str, Any] | None) -> dict[str, str]:
    """Query parameters of the pulls listing (merged/closed events list closed PRs)."""
    filt = github_filter or {}
    event = event_name(filt)
    state = "closed" if event in ("pr_merged", "pr_closed") else str(filt.get("state") or "open")
    params = {"state": state, "sort": "updated", "direction": "desc", "per_page": "100"}
    if filt.get("base"):
        params["base"] = str(filt["base"])
    return params


def fingerprint(repo: str, github_filter: Mapping[str, Any] | None) -> str:
    """What a scan's results depend on: a changed repo or filter invalidates held state."""
    return json.dumps([repo.lower(), dict(github_filter or {})], sort_keys=True)


class PullFields(TypedDict):
    """What a fire's trigger context tells of one pull request (``github_events`` items)."""

    event: str
    pr_number: int
    pr_title: str
    pr_url: str | None
    pr_author: str | None
    pr_state: str | None
    updated_at: str
    pr_created_at: str | None
    pr_closed_at: str | None
    pr_merged_at: str | None
    head_sha: str | None
    head_ref: str | None
    base_ref: str | None
    draft: bool
    head_repo: str | None
    head_repo_is_fork: bool
    is_same_repo: bool


@dataclass(frozen=True, slots=True)
class PullEvent:
    """One pull request as an event of the schedule's kind."""

    key: Key
    updated_at: str
    number: int
    dispatchable: bool
    fields: PullFields


def _get(mapping: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(part)
    return mapping


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def is_same_repo(pr: Mapping[str, Any], repo: str) -> bool:
    """The head branch lives in the base repository (not a fork); no head repo: not same."""
    head_id, base_id = _int(_get(pr, "head", "repo", "id")), _int(_get(pr, "base", "repo", "id"))
    if head_id is not None and base_id is not None:
        return head_id == base_id
    head_name = _get(pr, "head", "repo", "full_name")
    return isinstance(head_name, str) and head_name.lower() == repo.lower()


def matches(pr: Mapping[str, Any], github_filter: Mapping[str, Any] | None, repo: str) -> bool:
    """The client-side filters (``base`` is also sent to GitHub; checked again here)."""
    filt = github_filter or {}
    base = filt.get("base")
    if base and _get(pr, "base", "ref") != base:
        return False
    draft = filt.get("draft")
    if isinstance(draft, bool) and bool(pr.get("draft")) != draft:
        return False
    return not (filt.get("same_repo_only") is True and not is_same_repo(pr, repo))


def _key_time(pr: Mapping[str, Any], event: str) -> str | None:
    if event == "pr_opened":
        return normalize_ts(pr.get("created_at"))
    if event == "pr_merged":
        return normalize_ts(pr.get("merged_at"))
    if event == "pr_closed":
        if pr.get("merged_at"):
            return None
        return normalize_ts(pr.get("closed_at"))
    return normalize_ts(pr.get("updated_at"))


def to_event(
    pr: Mapping[str, Any], *, event: str, repo: str, github_filter: Mapping[str, Any] | None
) -> PullEvent | None:
    """The PR as an event of kind ``event``, or ``None`` (not such an event, or malformed)."""
    number = _int(pr.get("number"))
    updated = normalize_ts(pr.get("updated_at"))
    if number is None or number < 0 or updated is None:
        return None
    when = _key_time(pr, event)
    if when is None:
        return None
    same = is_same_repo(pr, repo)
    title = pr.get("title")
    fields = PullFields(
        event=event,
        pr_number=number,
        pr_title=title if isinstance(title, str) else "",
        pr_url=_text(pr.get("html_url")),
        pr_author=_text(_get(pr, "user", "login")),
        pr_state=_text(pr.get("state")),
        updated_at=updated,
        pr_created_at=normalize_ts(pr.get("created_at")),
        pr_closed_at=normalize_ts(pr.get("closed_at")),
        pr_merged_at=normalize_ts(pr.get("merged_at")),
        head_sha=_text(_get(pr, "head", "sha")),
        head_ref=_text(_get(pr, "head", "ref")),
        base_ref=_text(_get(pr, "base", "ref")),
        draft=bool(pr.get("draft")),
        head_repo=_text(_get(pr, "head", "repo", "full_name")),
        head_repo_is_fork=bool(_get(pr, "head", "repo", "fork")),
        is_same_repo=same,
    )
    return PullEvent(
        key=(when, number),
        updated_at=updated,
        number=number,
        dispatchable=matches(pr, github_filter, repo),
        fields=fields,
    )


def collect(
    pulls: Iterable[Any],
    *,
    event: str,
    repo: str,
    github_filter: Mapping[str, Any] | None,
    into: dict[int, PullEvent] | None = None,
) -> dict[int, PullEvent]:
    """Events by PR number; a PR seen twice (pages shift while paging) keeps its newest version."""
    out: dict[int, PullEvent] = {} if into is None else into
    for pr in pulls:
        if not isinstance(pr, Mapping):
            continue
        item = to_event(pr, event=event, repo=repo, github_filter=github_filter)
        if item is None:
            continue
        known = out.get(item.number)
        if known is None or (item.updated_at, item.key) >= (known.updated_at, known.key):
            out[item.number] = item
    return out


def after_cursor(events: Iterable[PullEvent], cursor: Key | None) -> list[PullEvent]:
    """Events newer than the cursor, oldest first."""
    return sorted((e for e in events if cursor is None or e.key > cursor), key=lambda e: e.key)


def reached(pulls: Sequence[Mapping[str, Any]], cursor: Key | None) -> bool:
    """Whether a page (``sort=updated``, newest first) reaches back past the cursor's time.

    Later pages hold only PRs updated earlier still, and every event time is at or before its
    PR's ``updated_at``: nothing on them can be newer than the cursor.
    """
    if cursor is None or not pulls:
        return cursor is not None
    stamps = [normalize_ts(pr.get("updated_at")) for pr in pulls if isinstance(pr, Mapping)]
    known = [s for s in stamps if s is not None]
    return bool(known) and min(known) < cursor[0]


def newest_updated(pulls: Sequence[Mapping[str, Any]]) -> str | None:
    """The greatest ``updated_at`` on a page (``None`` for an empty page)."""
    stamps = [normalize_ts(pr.get("updated_at")) for pr in pulls if isinstance(pr, Mapping)]
    known = [s for s in stamps if s is not None]
    return max(known) if known else None


def oldest_updated(pulls: Sequence[Mapping[str, Any]]) -> str | None:
    """The smallest ``updated_at`` on a page (``None`` for an empty page)."""
    stamps = [normalize_ts(pr.get("updated_at")) for pr in pulls if isinstance(pr, Mapping)]
    known = [s for s in stamps if s is not None]
    return min(known) if known else None
