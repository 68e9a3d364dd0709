"""A hostile GitHub cannot stretch, flood or crash a poll (regressions; GitHub is the double)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx

from studio_scheduler_core._github.client import (
    MAX_PAGE_ITEMS,
    MAX_RESPONSE_BYTES,
    GithubClient,
)
from studio_scheduler_core._github.events import collect, normalize_ts

URL = "https://api.example.test/repos/o/r/pulls"


class _Stream(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes], delay: float = 0.0) -> None:
        self._chunks, self._delay = chunks, delay

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            if self._delay:
                await asyncio.sleep(self._delay)
            yield chunk


def _client(chunks: list[bytes], *, delay: float = 0.0, timeout: float = 5.0) -> GithubClient:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_Stream(chunks, delay))

    return GithubClient(
        api_url="https://api.example.test",
        token=None,
        timeout=timeout,
        transport=httpx.MockTransport(answer),
    )


async def test_a_trickled_answer_is_cut_at_the_timeout() -> None:
    client = _client([b" "] * 40 + [b"[]"], delay=0.1, timeout=0.5)
    started = time.monotonic()
    page = await client.get_pulls(URL, now=time.time())
    await client.aclose()
    assert page.status == "error" and "within 0.5s" in page.detail
    assert time.monotonic() - started < 3.0  # not the 4 s the server takes


async def test_a_huge_answer_is_refused_without_reading_it_all() -> None:
    chunk = b" " * (1024 * 1024)
    client = _client([b"["] + [chunk] * (MAX_RESPONSE_BYTES // len(chunk) + 4) + [b"]"])
    page = await client.get_pulls(URL, now=time.time())
    await client.aclose()
    assert page.status == "error" and "larger than" in page.detail


async def test_deeply_nested_json_is_not_json_not_a_crash() -> None:
    client = _client([b"[" * 200_000 + b"]" * 200_000])
    page = await client.get_pulls(URL, now=time.time())
    await client.aclose()
    assert page.status == "error" and "not JSON" in page.detail


async def test_a_page_far_longer_than_asked_for_is_refused() -> None:
    client = _client([b"[" + b",".join([b"{}"] * (MAX_PAGE_ITEMS + 1)) + b"]"])
    page = await client.get_pulls(URL, now=time.time())
    await client.aclose()
    assert page.status == "error" and "entries on one page" in page.detail


def test_an_out_of_range_timestamp_is_unusable_not_a_crash() -> None:
    assert normalize_ts("9999-12-31T23:59:59-12:00") is None
    assert normalize_ts("0001-01-01T00:00:00+12:00") is None
    good = {"number": 1, "updated_at": "2024-05-01T10:00:00Z"}
    poison = {"number": 2, "updated_at": "9999-12-31T23:59:59-12:00"}
    events = collect([poison, good], event="pr_updated", repo="o/r", github_filter=None)
    assert list(events) == [1]  # the poison item is skipped; the poll goes on
