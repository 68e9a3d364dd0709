"""Shared helpers for studio-launcher's tests: real child processes, a fake `li`, /proc checks.

Tests run with ``--import-mode=importlib``, so helpers reach them through the ``helpers`` fixture.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from studio_launcher.testing import write_fake_li

PY = sys.executable


def py(code: str, *args: str) -> list[str]:
    """argv running ``code`` with this interpreter (no shell)."""
    return [PY, "-c", code, *args]


def proc_state(pid: int) -> str | None:
    """The /proc state letter of ``pid``, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 1 :].split()[0].decode()


def gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (absent, or a zombie nobody reaped yet)."""
    return proc_state(pid) in (None, "Z", "X")


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` passes (a liveness bound, not a timing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


async def async_wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


def kill_quietly(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, 9)


@pytest.fixture
def fake_li(tmp_path: Path) -> Path:
    return write_fake_li(tmp_path / "bin")


@pytest.fixture
def prefix(fake_li: Path) -> list[str]:
    return [str(fake_li)]


@pytest.fixture
def private_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the stdlib's temp directory at an empty folder so created files can be counted."""
    import tempfile

    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def helpers() -> SimpleNamespace:
    return SimpleNamespace(
        PY=PY,
        py=py,
        proc_state=proc_state,
        gone=gone,
        wait_for=wait_for,
        async_wait_for=async_wait_for,
        kill_quietly=kill_quietly,
    )
