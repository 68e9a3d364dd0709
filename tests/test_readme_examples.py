"""The package READMEs' examples run as written.

Every fenced ```python block preceded by ``<!-- tested -->`` in ``packages/*/README.md`` is run
as a program in a subprocess, in an empty directory with ``HOME`` pointing there (so the
default database ``~/.lionagi/studio/state.db`` is a fresh one), and must exit 0 and leave the
effect it describes. The CLI README's github_poll example is run too: its ``studio schedule
create`` line creates the schedule, and a real engine polling a loopback stand-in for GitHub
fires it, so every placeholder in its prompt must render from the event.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from studio_api.testing import ServeProcess, isolated_env
from studio_launcher.testing import write_fake_li
from studio_scheduler_core import SchedulerEngine, SchedulerSettings

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- tested -->"
_BLOCK = re.compile(r"^" + re.escape(MARKER) + r"\s*\n```python\n(.*?)^```", re.M | re.S)


@dataclass(frozen=True)
class Example:
    """One tested README block: ``<package>#<n>`` (1-based, in file order) and its code."""

    id: str
    readme: Path
    code: str


def marked_examples() -> list[Example]:
    """Every marked python block of every package README."""
    found: list[Example] = []
    for readme in sorted(ROOT.glob("packages/*/README.md")):
        text = readme.read_text(encoding="utf-8")
        for n, match in enumerate(_BLOCK.finditer(text), start=1):
            found.append(Example(f"{readme.parent.name}#{n}", readme, match.group(1)))
    return found


@dataclass
class Ran:
    """What a run of an example left behind."""

    base: Path
    stdout: str
    env: dict[str, str]

    @property
    def home_db(self) -> Path:
        return self.base / ".lionagi" / "studio" / "state.db"


def rows(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


# -- what each example must leave behind ---------------------------------------------------------
def check_state(ran: Ran) -> None:
    assert ran.home_db.is_file()
    assert rows(ran.home_db, "SELECT COUNT(*) AS n FROM notes") == [{"n": 2}]
    assert ran.stdout.strip() == "2"


def check_launcher(ran: Ran) -> None:
    assert ran.stdout.strip().splitlines()[-1] == "(0, '')"
    assert re.match(r"pid \d+$", ran.stdout.strip().splitlines()[0])
    [entry] = [json.loads(line) for line in Path(ran.env["FAKE_LI_LOG"]).read_text().splitlines()]
    assert entry["argv"] == ["agent", "--", "claude/sonnet", "Review Fix bug"]
    assert entry["cwd"] == str(ran.base)
    assert entry["invocation_id"] == "0123456789ab"


def check_outbox_producer(ran: Ran) -> None:
    db = ran.base / "shop.db"
    [row] = rows(db, "SELECT id, kind, deliver_to, status, dedup_key, payload FROM dispatch_outbox")
    assert row["status"] == "pending"
    assert (row["kind"], row["deliver_to"]) == ("order_created", "ops-channel")
    assert row["dedup_key"] == "order_created:o1"
    assert json.loads(row["payload"])["body"] == {"order": "o1"}
    assert rows(db, "SELECT id FROM orders") == [{"id": "o1"}]
    [transition] = rows(db, "SELECT entity_id, reason_code FROM status_transitions")
    assert transition == {"entity_id": row["id"], "reason_code": "dispatch.pending.enqueued"}
    assert ran.stdout.split() == [row["id"], "pending"]


def check_outbox_delivery(ran: Ran) -> None:
    db = ran.base / "shop.db"
    [row] = rows(db, "SELECT id, status, attempt FROM dispatch_outbox")
    assert (row["status"], row["attempt"]) == ("delivered", 1)
    [line] = (ran.base / "received.jsonl").read_text().splitlines()
    signal = json.loads(line)
    assert signal["dispatch_id"] == row["id"]
    assert signal["body"] == {"order": "o2"}
    assert "'attempted': 1, 'delivered': 1" in ran.stdout


def check_scheduler_core(ran: Ran) -> None:
    assert ran.stdout.strip() == "completed run.completed.ok"
    [run] = rows(ran.home_db, "SELECT status, exit_code, action_args FROM schedule_runs")
    assert (run["status"], run["exit_code"]) == ("completed", 0)
    assert json.loads(run["action_args"]) == ["python3", "-c", "print('report')"]
    [schedule] = rows(ran.home_db, "SELECT name, next_fire_at FROM schedules")
    assert schedule["name"] == "nightly-report"
    assert schedule["next_fire_at"] > time.time()  # the manual fire left the cadence alone


def check_studio_api(ran: Ran) -> None:
    assert ran.stdout.strip() == "ok True"
    assert ran.home_db.is_file()  # the default database, created and migrated at startup
    assert rows(ran.home_db, "SELECT COUNT(*) AS n FROM schedules") == [{"n": 0}]


CHECKS: dict[str, Callable[[Ran], None]] = {
    "launcher#1": check_launcher,
    "outbox#1": check_outbox_producer,
    "outbox#2": check_outbox_delivery,
    "scheduler-core#1": check_scheduler_core,
    "state#1": check_state,
    "studio-api#1": check_studio_api,
}


def test_every_tested_block_has_a_check() -> None:
    # A marker lost from a README (or a block added without a check) fails here.
    assert sorted(e.id for e in marked_examples()) == sorted(CHECKS)


@pytest.mark.parametrize("example", marked_examples(), ids=lambda e: e.id)
def test_readme_example_runs(example: Example, tmp_path: Path) -> None:
    base = tmp_path / "work"
    base.mkdir()
    fake_li = write_fake_li(tmp_path / "fake-bin")
    env = isolated_env(
        base,
        {
            "LIONAGI_LI_EXECUTABLE": str(fake_li),
            "FAKE_LI_LOG": str(tmp_path / "li.jsonl"),
        },
    )
    script = tmp_path / "example.py"
    script.write_text(example.code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=base,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{example.id} exited {done.returncode}:\n{done.stderr}"
    CHECKS[example.id](Ran(base=base, stdout=done.stdout, env=env))


# -- the CLI README's github_poll example ---------------------------------------------------------
def cli_command(name: str) -> list[str]:
    """The CLI README's ``studio schedule create NAME …`` line (continuations joined)."""
    text = (ROOT / "packages" / "cli" / "README.md").read_text(encoding="utf-8")
    joined = re.sub(r"\\\n\s*", " ", text)
    for line in joined.splitlines():
        if line.strip().startswith(f"studio schedule create {name} "):
            return shlex.split(line.strip())
    raise AssertionError(f"no `studio schedule create {name}` line in the CLI README")


PR = {
    "number": 7,
    "title": "Fix the widget",
    "html_url": "https://github.example/octo/widgets/pull/7",
    "state": "open",
    "draft": False,
    "user": {"login": "octocat"},
    "created_at": "2026-01-02T03:04:05Z",
    "updated_at": "2026-01-02T03:04:05Z",
    "closed_at": None,
    "merged_at": None,
    "head": {"sha": "a" * 40, "ref": "fix", "repo": {"id": 1, "full_name": "octo/widgets"}},
    "base": {"ref": "main", "repo": {"id": 1, "full_name": "octo/widgets"}},
}


@pytest.fixture
def github() -> Iterator[str]:
    """A loopback stand-in for GitHub's pulls listing of octo/widgets: one open PR."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path.split("?", 1)[0] == "/repos/octo/widgets/pulls"
            body = json.dumps([PR] if found else {"message": "Not Found"}).encode()
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def fire_github_schedule(db: Path, settings: SchedulerSettings) -> None:
    engine = SchedulerEngine(db, settings=settings)
    await engine.start(loop=False)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            await engine.tick_once()
            await engine.wait_idle()
            if rows(db, "SELECT 1 FROM schedule_runs WHERE status = 'completed'"):
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the github_poll schedule never completed a run")
    finally:
        await engine.stop()


def test_cli_readme_github_example_renders_its_placeholders(tmp_path: Path, github: str) -> None:
    db = tmp_path / "state.db"
    log = tmp_path / "li.jsonl"
    fake_li = write_fake_li(tmp_path / "fake-bin")
    argv = cli_command("prs")
    assert argv[0] == "studio"
    env = isolated_env(tmp_path, {"LIONAGI_LI_EXECUTABLE": str(fake_li)})
    done = subprocess.run(
        [sys.executable, "-m", "studio_cli", *argv[1:], "--db", str(db)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    prompt_flag = argv.index("--prompt")
    assert "{{" in argv[prompt_flag + 1]  # the example does use placeholders

    settings = SchedulerSettings(
        timezone="UTC",
        li_executable=str(fake_li),
        github_api_url=github,
        child_env={**env, "FAKE_LI_LOG": str(log)},
    )
    asyncio.run(fire_github_schedule(db, settings))
    [entry] = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["prompt"] == "review PR #7: Fix the widget"


# -- the root README's quickstart -----------------------------------------------------------------
QUICKSTART_MARKER = "<!-- tested: quickstart -->"
_QUICKSTART = re.compile(
    r"^" + re.escape(QUICKSTART_MARKER) + r"\s*\n```sh\n(.*?)^```", re.M | re.S
)


def quickstart_commands() -> list[list[str]]:
    """The quickstart's command lines (continuations joined), as argvs, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines: list[list[str]] = []
    for block in _QUICKSTART.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        lines += [shlex.split(line) for line in joined.splitlines() if line.strip()]
    return lines


def test_readme_quickstart_runs_its_first_command_schedule(tmp_path: Path) -> None:
    commands = quickstart_commands()
    assert commands[0][:2] == ["pip", "install"]  # done: the test environment has every package
    serve = commands[1]
    split = next(i for i, word in enumerate(serve) if "=" not in word)
    assert serve[split:] == ["studio", "serve"], serve
    env = dict(word.split("=", 1) for word in serve[:split])
    assert "LIONAGI_SCHEDULER_COMMAND_ALLOWLIST" in env  # the first command schedule may run
    # the README's settings replace the harness's own allow-list
    server = ServeProcess(tmp_path / "studio", env=env)
    assert (
        server.env["LIONAGI_SCHEDULER_COMMAND_ALLOWLIST"]
        == env["LIONAGI_SCHEDULER_COMMAND_ALLOWLIST"]
    )
    server.start()
    try:
        cli_env = {
            **server.env,
            "LIONAGI_STUDIO_DB": str(server.db),
            "LIONAGI_STUDIO_URL": server.url,
        }
        for argv in commands[2:]:
            assert argv[0] == "studio", argv
            done = subprocess.run(
                [sys.executable, "-m", "studio_cli", *argv[1:]],
                cwd=server.base,
                env=cli_env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, (
                f"{shlex.join(argv)} exited {done.returncode}:\n{done.stderr}"
            )
        [run] = server.rows("SELECT id, status FROM schedule_runs")
        assert run["status"] == "completed"
        log = server.request("GET", f"/api/schedules/runs/{run['id']}/log")
        assert log.text.strip() == "hello from Studio"
    finally:
        server.close()
        server.stop()


# -- links between the READMEs and docs/ ----------------------------------------------------------
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(markdown: Path) -> set[str]:
    """GitHub's heading anchors of a markdown file."""
    out: set[str] = set()
    for line in markdown.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            out.add(slug)
    return out


def test_relative_links_in_readmes_and_docs_resolve() -> None:
    pages = [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))]
    pages += sorted(ROOT.glob("packages/*/README.md"))
    assert len(list(ROOT.glob("docs/*.md"))) >= 4
    checked = 0
    for page in pages:
        for target in _LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            assert resolved.exists(), f"{page.relative_to(ROOT)}: broken link {target}"
            if anchor and resolved.is_file():
                assert anchor in _anchors(resolved), f"{page.relative_to(ROOT)}: no #{anchor}"
            checked += 1
    assert checked >= 10
