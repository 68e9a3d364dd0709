"""A small real HTTP server on 127.0.0.1 standing in for GitHub's pulls endpoint (test double).

``GET /repos/{owner}/{name}/pulls`` lists the repo's pull requests filtered by ``state`` and
``base``, sorted by ``updated_at`` descending, paged by ``page``/``per_page`` with a
``Link: <…>; rel="next"`` header, with a content ETag (``If-None-Match`` → 304). Scripted
answers (``fail_next``) replace the next requests with 401/403/429/500 and given headers.
Every request is recorded (path, query, headers).

Test modules load this file by path (pytest's importlib mode has no tests package).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest


def iso(epoch: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Request:
    path: str
    query: dict[str, str]
    headers: dict[str, str]


@dataclass
class FakeGithub:
    """The server's state; mutate it from tests (methods take the lock)."""

    pulls: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    scripted: list[tuple[int, dict[str, str], Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""
    repo_ids: dict[str, int] = field(default_factory=dict)

    # -- data -------------------------------------------------------------------------------
    def add_pr(
        self,
        repo: str,
        number: int,
        *,
        updated: float,
        created: float | None = None,
        title: str | None = None,
        state: str = "open",
        draft: bool = False,
        base: str = "main",
        fork: bool = False,
        merged: float | None = None,
        closed: float | None = None,
        author: str = "octo",
    ) -> dict[str, Any]:
        with self.lock:
            base_id = self.repo_ids.setdefault(repo.lower(), 1000 + len(self.repo_ids))
            head_name = f"forker/{repo.split('/')[1]}" if fork else repo
            head_id = 9000 + number if fork else base_id
            pr = {
                "number": number,
                "title": title if title is not None else f"PR {number}",
                "html_url": f"https://github.example/{repo}/pull/{number}",
                "state": state,
                "draft": draft,
                "user": {"login": author},
                "created_at": iso(created if created is not None else updated),
                "updated_at": iso(updated),
                "closed_at": iso(closed) if closed is not None else None,
                "merged_at": iso(merged) if merged is not None else None,
                "head": {
                    "sha": f"{number:040x}",
                    "ref": f"feature-{number}",
                    "repo": {"id": head_id, "full_name": head_name, "fork": fork},
                },
                "base": {"ref": base, "repo": {"id": base_id, "full_name": repo}},
            }
            self.pulls.setdefault(repo, {})[number] = pr
            return pr

    def update_pr(self, repo: str, number: int, *, updated: float, **fields: Any) -> None:
        with self.lock:
            pr = self.pulls[repo][number]
            pr["updated_at"] = iso(updated)
            for key, value in fields.items():
                if key in ("merged_at", "closed_at") and isinstance(value, int | float):
                    value = iso(value)
                pr[key] = value

    def fail_next(self, status: int, headers: dict[str, str] | None = None, times: int = 1) -> None:
        with self.lock:
            for _ in range(times):
                self.scripted.append((status, dict(headers or {}), {"message": f"HTTP {status}"}))

    def pull_requests(self) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.path.endswith("/pulls")]

    def clear_requests(self) -> None:
        with self.lock:
            self.requests.clear()

    # -- serving ----------------------------------------------------------------------------
    def answer(
        self, path: str, query: dict[str, str], headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            self.requests.append(Request(path, query, headers))
            if self.scripted:
                status, extra, body = self.scripted.pop(0)
                return status, extra, json.dumps(body).encode()
            parts = path.strip("/").split("/")
            if len(parts) != 4 or parts[0] != "repos" or parts[3] != "pulls":
                return 404, {}, b'{"message": "Not Found"}'
            repo = f"{parts[1]}/{parts[2]}"
            state = query.get("state", "open")
            rows = [
                pr
                for pr in self.pulls.get(repo, {}).values()
                if (state == "all" or pr["state"] == state)
                and ("base" not in query or pr["base"]["ref"] == query["base"])
            ]
            rows.sort(key=lambda pr: (pr["updated_at"], pr["number"]), reverse=True)
            per_page = int(query.get("per_page", "30"))
            page = int(query.get("page", "1"))
            chunk = rows[(page - 1) * per_page : page * per_page]
            body = json.dumps(chunk).encode()
            etag = (
                '"'
                + hashlib.sha256(
                    path.encode() + repr(sorted(query.items())).encode() + body
                ).hexdigest()[:20]
                + '"'
            )
            out = {"ETag": etag, "Content-Type": "application/json"}
            if page * per_page < len(rows):
                nxt = dict(query, page=str(page + 1))
                link = f"{self.url}{path}?" + "&".join(f"{k}={v}" for k, v in nxt.items())
                out["Link"] = f'<{link}>; rel="next"'
            if headers.get("if-none-match") == etag:
                return 304, {"ETag": etag}, b""
            return 200, out, body


def _handler(fake: FakeGithub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            split = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(split.query).items()}
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, extra, body = fake.answer(split.path, query, headers)
            self.send_response(status)
            for key, value in extra.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def github() -> Iterator[FakeGithub]:
    """A running fake GitHub on a free loopback port."""
    fake = FakeGithub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-github", daemon=True
    )
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# -- engine-side helpers shared by the github test modules ----------------------------------
REPO = "acme/widgets"


def github_schedule(name: str, *, args: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    """Create data for a github_poll schedule running ``true {{pr_number}} …``."""
    data: dict[str, Any] = {
        "name": name,
        "trigger_type": "github_poll",
        "github_repo": REPO,
        "poll_interval_sec": 60,
        "overlap_policy": "allow",
        "action_kind": "command",
        "action_command": "true",
        "action_command_args": args if args is not None else ["{{pr_number}}", "{{pr_title}}"],
    }
    data.update(fields)
    return data


async def poll(engine: Any) -> None:
    """One poll and the fires it leads to: tick (starts the poll), wait for it, then tick until
    no github row is due (capacity deferrals take several passes)."""
    from studio_state import fetch_value

    source = engine.registry.get("github_poll")
    await engine.tick_once()
    await source.wait_polls()
    for _ in range(100):  # capacity deferrals: tick until no github row is due any more
        await engine.tick_once()
        await engine.wait_idle()
        due = await fetch_value(
            engine.conn,
            "SELECT COUNT(*) FROM schedules WHERE enabled = 1 AND trigger_type = 'github_poll' "
            "AND next_fire_at <= ?",
            (engine.clock(),),
        )
        if not due:
            return


async def fired(conn: Any, schedule_id: str) -> list[dict[str, Any]]:
    """The schedule's runs that fired (not skipped), oldest first, with decoded contexts."""
    from studio_state import fetch_all

    rows = await fetch_all(
        conn,
        "SELECT * FROM schedule_runs WHERE schedule_id = ? AND status != 'skipped' "
        "ORDER BY created_at, rowid",
        (schedule_id,),
    )
    for row in rows:
        row["trigger_context"] = json.loads(row["trigger_context"])
        row["action_args"] = json.loads(row["action_args"])
    return rows


def numbers(runs: list[dict[str, Any]]) -> list[int]:
    """The PR number each run fired for."""
    return [r["trigger_context"]["github_events"][0]["pr_number"] for r in runs]
