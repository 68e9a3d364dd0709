"""Shared helpers: run the real ``studio`` console script in a subprocess, isolated env.

Every invocation gets HOME set to the test's tmp_path (so the default database never touches
the real home), no inherited LIONAGI_* / STUDIO_* variables, UTC as the scheduler zone, and a
temp database unless the test says otherwise. Every result is checked for a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest


def _studio_command() -> list[str]:
    """The installed ``studio`` console script beside this interpreter (else ``-m``)."""
    bindir = Path(sys.executable).parent
    script = shutil.which("studio", path=str(bindir))
    if script:
        return [script]
    return [sys.executable, "-m", "studio_cli"]


STUDIO = _studio_command()
COMMAND_TIMEOUT = 60


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str
    args: Sequence[str]

    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def error_line(self) -> str:
        """The single ``error: …`` line of a failed command."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, f"expected one stderr line, got {lines!r}"
        assert lines[0].startswith("error: "), lines[0]
        return lines[0]


def base_env(home: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LIONAGI_", "STUDIO_", "GITHUB_")) and key != "COLUMNS"
    }
    env.update(
        HOME=str(home),
        LIONAGI_SCHEDULER_TZ="UTC",
        PYTHONUNBUFFERED="1",
    )
    return env


class Studio:
    """Runs ``studio …`` against one temp database."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.workdir = tmp_path / "work"
        self.workdir.mkdir()
        self.db = tmp_path / "state.db"
        self.env = base_env(self.home)
        self.env["LIONAGI_STUDIO_DB"] = str(self.db)

    def run(
        self,
        *args: str,
        input: str | None = None,
        env: Mapping[str, str | None] | None = None,
        cwd: Path | None = None,
        expect: int | None = 0,
    ) -> Result:
        full_env = dict(self.env)
        for key, value in (env or {}).items():
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
        proc = subprocess.run(
            [*STUDIO, *args],
            input=input,
            capture_output=True,
            text=True,
            env=full_env,
            cwd=cwd or self.workdir,
            timeout=COMMAND_TIMEOUT,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        result = Result(proc.returncode, proc.stdout, proc.stderr, args)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stdout, proc.stdout
        if expect is not None:
            assert proc.returncode == expect, (
                f"studio {' '.join(args)} exited {proc.returncode}, expected {expect}\n"
                f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
            )
        return result

    def ok_json(self, *args: str, **kwargs: Any) -> Any:
        result = self.run(*args, "--json", **kwargs)
        return result.json()

    def fail(self, *args: str, code: int = 1, **kwargs: Any) -> Result:
        result = self.run(*args, expect=code, **kwargs)
        assert result.stdout == "", result.stdout
        if code == 1:
            _ = result.error_line
        return result

    def create(self, name: str, *flags: str) -> dict[str, Any]:
        """Create a schedule (interval 1h + a command action unless flags say otherwise)."""
        args = list(flags) or ["--interval", "1h", "--command", "python3", "--command-arg", "ok"]
        created: dict[str, Any] = self.ok_json("schedule", "create", name, *args)
        return created


@pytest.fixture
def studio(tmp_path: Path) -> Studio:
    return Studio(tmp_path)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    url: str
    process: subprocess.Popen[str]
    log: Path


@pytest.fixture
def server(studio: Studio, tmp_path: Path) -> Iterator[Server]:
    """``studio serve`` on a free loopback port over the test database (1 s tick)."""
    port = free_port()
    env = dict(studio.env)
    env.update(
        LIONAGI_STUDIO_TICK_SECONDS="1",
        LIONAGI_SCHEDULER_COMMAND_ALLOWLIST="python3",
    )
    log = tmp_path / "server.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [*STUDIO, "serve", "--host", "127.0.0.1", "--port", str(port), "--db", str(studio.db)],
            env=env,
            cwd=studio.workdir,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise AssertionError(f"studio serve exited {process.returncode}: {log.read_text()}")
        try:
            if httpx.get(f"{url}/api/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"studio serve did not come up: {log.read_text()}")
        time.sleep(0.1)
    studio.env["LIONAGI_STUDIO_URL"] = url
    studio.env["LIONAGI_SCHEDULER_COMMAND_ALLOWLIST"] = "python3"
    try:
        yield Server(url=url, process=process, log=log)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
