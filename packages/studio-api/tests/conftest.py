"""Shared fixtures: a real Studio served by uvicorn on 127.0.0.1 with a temp database."""

from __future__ import annotations

import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from studio_api import StudioSettings
from studio_api.testing import StudioServer


class Studio:
    """A served Studio: its settings, base URL, an HTTP client and helpers to wait and peek."""

    def __init__(self, server: StudioServer, client: httpx.Client) -> None:
        self.server = server
        self.settings = server.settings
        self.base_url = server.base_url
        self.client = client

    @property
    def engine(self) -> Any:
        return self.server.app.state.engine

    def db_rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        """Read the database through a separate plain sqlite3 connection."""
        conn = sqlite3.connect(self.settings.db, timeout=10)
        conn.row_factory = sqlite3.Row
        try:
            return [dict(row) for row in conn.execute(sql, params)]
        finally:
            conn.close()

    def stop(self) -> None:
        self.client.close()
        self.server.stop()


def wait_for(predicate: Callable[[], Any], *, timeout: float = 20.0, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)


@pytest.fixture
def wait() -> Callable[..., Any]:
    return wait_for


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def alive() -> Callable[[int], bool]:
    return process_alive


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def make_settings(tmp_path: Path, workdir: Path) -> Callable[..., StudioSettings]:
    """Settings for a test server: temp db, free port, 1 s tick, sh/python3 allowed.

    Built from an empty environment so the developer's own LIONAGI_* variables never leak in.
    """

    def build(**overrides: Any) -> StudioSettings:
        values: dict[str, Any] = {
            "db": tmp_path / "studio" / "state.db",
            "host": "127.0.0.1",
            "port": 0,
            "tick_seconds": 1,
            "command_allowlist": ("sh", "python3"),
            "default_cwd": str(workdir),
        }
        values.update(overrides)
        return StudioSettings.from_env({}, **values)

    return build


@pytest.fixture
def serve(make_settings: Callable[..., StudioSettings]) -> Iterator[Callable[..., Studio]]:
    """Start a server per call (``serve(**setting_overrides)``); all are stopped at the end."""
    started: list[Studio] = []

    def start(settings: StudioSettings | None = None, **overrides: Any) -> Studio:
        settings = settings if settings is not None else make_settings(**overrides)
        server = StudioServer(settings)
        server.start()
        headers = {}
        if settings.auth_token is not None:
            headers["Authorization"] = f"Bearer {settings.auth_token.get_secret_value()}"
        client = httpx.Client(base_url=server.base_url, headers=headers, timeout=30)
        studio = Studio(server, client)
        started.append(studio)
        return studio

    yield start
    for studio in reversed(started):
        studio.stop()


@pytest.fixture
def studio(serve: Callable[..., Studio]) -> Studio:
    """One served Studio with the default test settings."""
    return serve()


@pytest.fixture
def script(workdir: Path) -> Callable[[str, str], Path]:
    """Write an sh script into the work directory; returns its path."""

    def write(name: str, body: str) -> Path:
        path = workdir / name
        path.write_text(body, encoding="utf-8")
        return path

    return write


@pytest.fixture
def command_schedule(workdir: Path) -> Callable[..., dict[str, Any]]:
    """A create body for an interval schedule running ``sh <script>`` in the work directory."""

    def body(name: str, script_path: Path | None = None, **fields: Any) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": name,
            "trigger_type": "interval",
            "interval_sec": 3600,
            "action_kind": "command",
            "action_command": "sh",
            "action_command_args": [str(script_path)] if script_path else ["true.sh"],
            "action_cwd": str(workdir),
        }
        data.update(fields)
        return data

    return body


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def port() -> int:
    return free_port()
