"""Shared fixtures: a real Studio served by uvicorn on 127.0.0.1 with a temp database."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from studio_api import StudioSettings
from studio_api.testing import ServedStudio, StudioServers
from studio_launcher.testing import fake_li  # noqa: F401  (fixture)
from studio_state.testing import (  # noqa: F401  (clean_environment: autouse fixture)
    clean_environment,
    free_port,
    pid_alive,
    wait_for,
)


@pytest.fixture
def wait() -> Callable[..., Any]:
    """:func:`studio_state.testing.wait_for`."""
    return wait_for


@pytest.fixture
def alive() -> Callable[[int], bool]:
    """:func:`studio_state.testing.pid_alive`."""
    return pid_alive


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
def serve(make_settings: Callable[..., StudioSettings]) -> Iterator[StudioServers]:
    """Start a server per call (``serve(**setting_overrides)``); all are stopped at the end."""
    with StudioServers(make_settings) as servers:
        yield servers


@pytest.fixture
def studio(serve: StudioServers) -> ServedStudio:
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


@pytest.fixture
def port() -> int:
    return free_port()
