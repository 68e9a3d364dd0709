"""Test support shared by every Studio package's tests (stdlib and pytest only).

The helpers the suites used to copy into their ``conftest.py`` live here once:

- :func:`wait_for` / :func:`eventually`: poll a condition (sync, or sync-or-async) until it
  holds, within a generous liveness bound; they return the value that held and fail the test
  with :class:`AssertionError` otherwise;
- :func:`proc_state`, :func:`pid_alive`, :func:`group_has_live_member` and
  :func:`kill_quietly`: look at and clean up real child processes through ``/proc``;
- :func:`free_port`: a loopback TCP port nothing listens on;
- :func:`db_rows`: read a database file through a plain ``sqlite3`` connection of the test's
  own (what another process would see committed);
- :func:`clean_environment`: an autouse fixture that removes ``LIONAGI_*`` and
  ``GITHUB_TOKEN`` from the environment, so a developer's shell cannot change a result;
- :func:`assert_public_api`: a package's ``__all__`` is sorted, importable and names exactly
  the public names its ``__init__`` defines or imports;
- :func:`load_beside`: import a helper module that sits beside a test file (test folders are
  not packages under pytest's importlib import mode).

A ``conftest.py`` registers the fixture by importing it::

    from studio_state.testing import clean_environment  # noqa: F401  (autouse)

Tests that need one of the cleared variables set it with ``monkeypatch.setenv``.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import errno
import importlib.util
import inspect
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar, cast

import pytest

from ._backend import is_postgres
from ._connection import connect_sync

__all__ = [
    "CLEARED_NAMES",
    "CLEARED_PREFIXES",
    "DEFAULT_TIMEOUT",
    "assert_public_api",
    "clean_environment",
    "cleared_variables",
    "db_rows",
    "eventually",
    "free_port",
    "group_has_live_member",
    "kill_quietly",
    "load_beside",
    "pid_alive",
    "proc_state",
    "public_names",
    "wait_for",
]

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0
"""Seconds :func:`wait_for` and :func:`eventually` wait: a liveness bound, never a timing."""

CLEARED_PREFIXES = ("LIONAGI_",)
"""Environment variables with these prefixes are removed for every test."""

CLEARED_NAMES = ("GITHUB_TOKEN",)
"""Environment variables removed for every test by name."""


# -- waiting ------------------------------------------------------------------------------------
def wait_for(
    predicate: Callable[[], T],
    timeout: float = DEFAULT_TIMEOUT,
    *,
    interval: float = 0.02,
    what: str = "",
) -> T:
    """Call ``predicate`` until it returns something truthy and return that value.

    Raises :class:`AssertionError` naming ``what`` (else the predicate) when ``timeout``
    seconds pass first. Blocks the thread: use :func:`eventually` inside a coroutine.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not met within {timeout}s: {what or predicate}")
        time.sleep(interval)


async def eventually(
    predicate: Callable[[], T | Awaitable[T]],
    timeout: float = DEFAULT_TIMEOUT,
    *,
    interval: float = 0.02,
    what: str = "",
) -> T:
    """Await ``predicate`` (a plain or a coroutine function) until it is truthy; return it.

    Sleeps with ``asyncio.sleep`` between tries, so the event loop (an engine, a server in the
    same loop) keeps running. Raises :class:`AssertionError` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return cast(T, value)
        if time.monotonic() > deadline:
            raise AssertionError(f"not met within {timeout}s: {what or predicate}")
        await asyncio.sleep(interval)


# -- processes ----------------------------------------------------------------------------------
def proc_state(pid: int) -> str | None:
    """The ``/proc/<pid>/stat`` state letter of ``pid`` (``R``, ``S``, ``Z`` …), or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 1 :].split()[0].decode()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process; a zombie nobody reaped yet counts as gone."""
    return proc_state(pid) not in (None, "Z", "X")


def group_has_live_member(pgid: int) -> bool:
    """Whether any live (non-zombie) process is in process group ``pgid``."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        fields = text.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def kill_quietly(*pids: int) -> None:
    """SIGKILL each pid, ignoring ones already gone (cleanup of children a test left)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


# -- network ------------------------------------------------------------------------------------
def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# -- databases ---------------------------------------------------------------------------------
def db_rows(db: str | Path, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
    """Run ``sql`` on its own short-lived connection to ``db``; rows as dicts.

    ``db`` is a SQLite file or a PostgreSQL URL (qmark placeholders either way).
    """
    if is_postgres(db):
        handle = connect_sync(db)
        try:
            return [dict(row) for row in handle.execute(sql, tuple(params))]
        finally:
            handle.close()
    conn = sqlite3.connect(db, timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in conn.execute(sql, tuple(params))]
    finally:
        conn.close()


# -- environment --------------------------------------------------------------------------------
def cleared_variables(environ: Iterable[str]) -> list[str]:
    """The names in ``environ`` that :func:`clean_environment` removes."""
    return [name for name in environ if name.startswith(CLEARED_PREFIXES) or name in CLEARED_NAMES]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove ``LIONAGI_*`` and ``GITHUB_TOKEN`` for the test (restored afterwards)."""
    for name in cleared_variables(list(os.environ)):
        monkeypatch.delenv(name)


# -- modules beside a test ---------------------------------------------------------------------
def load_beside(anchor: str | Path, filename: str, module_name: str) -> ModuleType:
    """Import ``filename`` from the folder of ``anchor`` (a test's ``__file__``) as
    ``module_name``, once: later calls return the module from ``sys.modules``."""
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, Path(anchor).with_name(filename))
        assert spec is not None and spec.loader is not None, filename
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


# -- public API ---------------------------------------------------------------------------------
def public_names(package: ModuleType) -> list[str]:
    """Names the package's ``__init__`` defines or imports at top level, without ``_``.

    Read from the source, so submodules that were imported later (and so became attributes
    of the package) do not count. Imports under a top-level ``if TYPE_CHECKING:`` count (the
    package serves them lazily, through ``__getattr__``); imports from ``__future__`` and
    ``typing`` do not (annotation helpers, not API).
    """
    names: set[str] = set()
    body = list(ast.parse(inspect.getsource(package)).body)
    while body:
        node = body.pop(0)
        if isinstance(node, ast.If) and ast.unparse(node.test) in _TYPE_CHECKING:
            body[:0] = node.body
        elif isinstance(node, ast.ImportFrom) and node.module not in ("__future__", "typing"):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return sorted(name for name in names if not name.startswith("_"))


_TYPE_CHECKING = ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def assert_public_api(package: ModuleType, *, dunders: Iterable[str] = ("__version__",)) -> None:
    """``package.__all__`` is sorted, every name in it is importable, and it lists exactly the
    public names of the package's ``__init__`` (plus the ``dunders`` it re-exports)."""
    exported = list(package.__all__)
    assert exported == sorted(exported), f"{package.__name__}.__all__ is not sorted"
    missing = [name for name in exported if not hasattr(package, name)]
    assert missing == [], f"{package.__name__}.__all__ names what it lacks: {missing}"
    expected = sorted([*public_names(package), *(d for d in dunders if hasattr(package, d))])
    assert sorted(exported) == expected, (
        f"{package.__name__}.__all__ differs from its public names: "
        f"extra {sorted(set(exported) - set(expected))}, "
        f"missing {sorted(set(expected) - set(exported))}"
    )


@contextlib.contextmanager
def mounted_tmpfs(parent: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``"64k"``, ``"8m"``) mounted at ``parent/mnt`` for the block, a
    real file system to fill up or remount read-only; lazily unmounted after. Mounting needs
    root (CI runs as root): elsewhere the test is skipped saying so."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs these as root)")
    mount = parent / "mnt"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill_disk(directory: Path, *, check: bool = True) -> Path:
    """Write ``directory/filler`` until the file system is full and return it (delete it to
    give the space back). With ``check``, asserts a further 8 KiB write fails with ENOSPC."""
    path = directory / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    if check:
        with pytest.raises(OSError) as full:
            (directory / "probe").write_bytes(b"x" * 8192)
        assert full.value.errno == errno.ENOSPC
    return path
