"""A hostile or broken GitHub: garbage JSON, poison items, huge pages, endless paging, slow
answers. A real loopback HTTP server stands in for GitHub; the github_poll client and scan
(what every poll runs) must answer with an error or the valid events, within the timeout,
and never raise."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from conftest import count

from studio_scheduler_core._github.client import GithubClient
from studio_scheduler_core._github.events import fingerprint
from studio_scheduler_core._github.scan import MAX_PAGES, scan

TIMEOUT = 1.0
BOUND = 5.0  # seconds a request may take at most against a 1 s timeout (generous: loaded CI)

GOOD = {
    "number": 42,
    "title": "fix: $(touch /tmp/pwned); `id` | rm -rf / && --help\n--",
    "updated_at": "2024-05-01T10:00:00Z",
    "created_at": "2024-05-01T09:00:00Z",
    "state": "open",
    "html_url": "https://github.com/o/r/pull/42",
    "user": {"login": "-rf"},
    "head": {"ref": "--upload-pack=evil", "sha": "abc", "repo": {"id": 1, "full_name": "o/r"}},
    "base": {"ref": "main", "repo": {"id": 1}},
}
POISON = [
    1,
    "x",
    None,
    [],
    {},
    {"number": "7", "updated_at": "2024-05-01T10:00:00Z"},
    {"number": True, "updated_at": "2024-05-01T10:00:00Z"},
    {"number": -3, "updated_at": "2024-05-01T10:00:00Z"},
    {"number": 5, "updated_at": 12345},
    {"number": 6, "updated_at": "not a date"},
    {"number": 8, "updated_at": "9999-12-31T23:59:59-12:00"},  # overflows on conversion to UTC
    {"number": 9, "updated_at": "0001-01-01T00:00:00+12:00"},  # underflows likewise
    {
        "number": 10,
        "updated_at": "2024-05-01T10:00:00Z",
        "title": {"x": 1},
        "head": "s",
        "base": None,
        "user": 5,
        "draft": "yes",
    },
    {"number": 10**40, "updated_at": "2024-05-01T10:00:00Z"},
    GOOD,
]

# mode -> (status, headers, body chunks, delay between chunks)
BIG = (
    b"[" + b",".join([json.dumps({**GOOD, "number": n}).encode() for n in range(1, 80_000)]) + b"]"
)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        mode = self.path.split("/")[3]  # /repos/o/<mode>/pulls
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        try:
            if mode == "html":
                self._send(200, b"<html><body>Unicorn! We're having trouble</body></html>")
            elif mode == "truncated":
                self._send(200, b'[{"number": 1, "updated_at": "2024-')
            elif mode == "object":
                self._send(200, b'{"message": "Bad credentials", "number": 1}')
            elif mode == "nul":
                self._send(200, b"\x00\xff\xfe[]")
            elif mode == "deep":
                self._send(200, b"[" * 200_000 + b"]" * 200_000)
            elif mode == "poison":
                self._send(200, json.dumps(POISON).encode())
            elif mode == "huge":  # ~40 MB of valid-looking pull requests
                self._send(200, BIG)
            elif mode == "endless":  # every page links to a next page
                self._send(
                    200,
                    json.dumps([]).encode(),
                    {"Link": f'<{base}{self.path}?page=2>; rel="next"'},
                )
            elif mode == "endless-full":
                page = [
                    {**GOOD, "number": n, "updated_at": "2030-01-01T00:00:00Z"} for n in range(100)
                ]
                self._send(
                    200,
                    json.dumps(page).encode(),
                    {"Link": f'<{base}/repos/o/endless-full/pulls?p=x>; rel="next"'},
                )
            elif mode == "offsite":
                self._send(
                    200,
                    json.dumps([GOOD]).encode(),
                    {"Link": '<http://169.254.169.254/latest/meta-data>; rel="next"'},
                )
            elif mode == "error500":
                self._send(500, b'{"message": "oops"}')
            elif mode == "slow-headers":
                time.sleep(TIMEOUT * 4)
                self._send(200, b"[]")
            elif mode == "trickle":  # headers at once, then one byte every 0.2 s for 8 s
                body = b" " * 40 + b"[]"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                for byte in body:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.2)
            else:
                self._send(404, b"{}")
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture(scope="module")
def github() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def _scan(url: str, repo: str, *, cursor: Any = ("2024-01-01T00:00:00Z", 0)) -> Any:
    client = GithubClient(api_url=url, token="secret-token", timeout=TIMEOUT)
    try:
        started = time.monotonic()
        result = await scan(
            client,
            repo=repo,
            github_filter=None,
            cursor=cursor,
            etag=None,
            fingerprint=fingerprint(repo, None),
            deep=None,
            now=time.time(),
        )
        elapsed = time.monotonic() - started
    finally:
        await client.aclose()
    count("inputs_tried")
    return result, elapsed


@pytest.mark.parametrize(
    "mode",
    ["html", "truncated", "object", "nul", "deep", "error500", "huge", "slow-headers", "trickle"],
)
async def test_a_broken_answer_is_a_failed_poll_within_the_timeout(github: str, mode: str) -> None:
    result, elapsed = await _scan(github, f"o/{mode}")
    assert result.status == "error", result
    assert result.page is not None and result.page.detail
    assert "secret-token" not in result.page.detail
    assert elapsed < BOUND, f"{mode} took {elapsed:.1f}s against a {TIMEOUT}s timeout"


async def test_poison_items_are_skipped_and_the_valid_pr_still_fires(github: str) -> None:
    result, _ = await _scan(github, "o/poison")
    assert result.status == "ok", result
    numbers = [event.number for event in result.events]
    assert 42 in numbers
    good = next(event for event in result.events if event.number == 42)
    assert good.fields["pr_title"] == GOOD["title"]  # kept verbatim; the launcher guards use
    assert set(numbers) <= {42, 10, 10**40}


async def test_endless_paging_stops_after_the_page_cap(github: str) -> None:
    result, elapsed = await _scan(github, "o/endless-full")
    assert result.status == "ok"
    assert result.pages == MAX_PAGES
    assert elapsed < BOUND * MAX_PAGES


async def test_a_link_off_the_api_origin_is_not_followed(github: str) -> None:
    result, _ = await _scan(github, "o/offsite")
    assert result.status == "ok" and result.pages == 1
    assert [event.number for event in result.events] == [42]
