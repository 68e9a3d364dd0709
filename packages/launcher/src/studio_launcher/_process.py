"""Process identity and process-group termination, from ``/proc`` (no psutil).

A child is recorded as ``(pid, start_time)``: the pid alone may have been reused by the time a
restarted daemon looks at it, the pair identifies one process. Children run as session leaders
(``start_new_session=True``), so their process-group id is their pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Collection, Mapping
from typing import Protocol

from ._exceptions import LaunchError

TERMINATE_GRACE_SECONDS = 5.0
"""Time between SIGTERM to a process group and SIGKILL."""

KILL_WAIT_SECONDS = 5.0
"""How long to wait for a group to disappear after SIGKILL before giving up."""


class Leader(Protocol):
    """The child a group teardown also waits for (reaped by its owner once it exits)."""

    @property
    def returncode(self) -> int | None: ...

    def kill(self) -> None: ...


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_POLL_MIN = 0.005
_POLL_MAX = 0.05


def _read_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after ``comm`` (index 0 = state, field 3 in proc(5))."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    # comm may contain spaces and parentheses: it ends at the last ')'.
    end = raw.rfind(b")")
    if end < 0:
        return None
    return raw[end + 1 :].decode("ascii", errors="replace").split()


_boot_time_cache: float | None = None


def _boot_time() -> float | None:
    """``btime`` from /proc/stat, read once per process (it is fixed for the life of the boot)."""
    global _boot_time_cache
    if _boot_time_cache is None:
        _boot_time_cache = _read_boot_time()
    return _boot_time_cache


def _read_boot_time() -> float | None:
    try:
        with open("/proc/stat", "rb") as handle:
            for line in handle:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_start_time(pid: int) -> float | None:
    """Return when process ``pid`` started, in UTC epoch seconds, or ``None`` if unknown.

    Read from ``/proc/<pid>/stat`` (``starttime``, clock ticks since boot) and ``btime`` in
    ``/proc/stat`` (read once per process, not per call); precision is one clock tick, plus any
    wall-clock step since boot.
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    fields = _read_stat(pid)
    boot = _boot_time()
    if fields is None or boot is None or len(fields) < 20:
        return None
    try:
        ticks = int(fields[19])
    except ValueError:
        return None
    return boot + ticks / _CLOCK_TICKS


def _is_running(pid: int) -> bool:
    fields = _read_stat(pid)
    return fields is not None and bool(fields) and fields[0] not in ("Z", "X", "x")


def is_same_process(pid: int, start_time: float | None, *, tolerance: float = 1.0) -> bool:
    """Return whether ``pid`` is alive (not a zombie) and started at ``start_time`` ± tolerance.

    ``False`` when ``start_time`` is ``None``: an unverifiable pid is never treated as ours.
    """
    if start_time is None:
        return False
    started = process_start_time(pid)
    if started is None or not _is_running(pid):
        return False
    return abs(started - start_time) <= tolerance


def process_group_of(pid: int) -> int | None:
    """The process-group id of live process ``pid`` (``None``: gone, a zombie, or unknown)."""
    fields = _read_stat(pid)
    if fields is None or len(fields) < 3 or fields[0] in ("Z", "X", "x"):
        return None
    try:
        return int(fields[2])
    except ValueError:
        return None


def _task_children(pid: int, task: int | str) -> list[int] | None:
    try:
        fd = os.open(f"/proc/{pid}/task/{task}/children", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = chunk = os.read(fd, 4096)
        while len(chunk) == 4096:
            chunk = os.read(fd, 4096)
            data += chunk
        return [int(p) for p in data.split()]
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def _children_of(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (any thread may have forked them)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for task in tasks:
        found.extend(_task_children(pid, task) or ())
    return found


def _environ(pid: int) -> dict[bytes, bytes] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:  # gone, or another user's process
        return None
    env: dict[bytes, bytes] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            env.setdefault(name, value)
    return env


def find_processes_by_env(
    name: str, values: Collection[str] | None, *, where: Mapping[str, str] | None = None
) -> dict[str, list[int]]:
    """Live processes whose environment sets ``name`` to one of ``values`` (``None``: to any
    value): value -> pids.

    For crash reconciliation of children whose pid was never recorded (the daemon died
    between exec and writing the pid down): every child runs with ``LIONAGI_INVOCATION_ID``
    and its descendants inherit it. Each variable of ``where`` must also be set to exactly
    that value. Read from ``/proc/<pid>/environ`` (the environment each process started
    with); processes that cannot be read (another user's, already gone) and this process are
    skipped. Returns only values that matched.
    """
    wanted = None if values is None else {os.fsencode(v) for v in values}
    if wanted is not None and not wanted:
        return {}
    key = os.fsencode(name)
    conditions = {os.fsencode(k): os.fsencode(v) for k, v in (where or {}).items()}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    me = os.getpid()
    found: dict[str, list[int]] = {}
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        env = _environ(int(entry)) or {}
        value = env.get(key)
        if value is None or (wanted is not None and value not in wanted):
            continue
        if any(env.get(k) != v for k, v in conditions.items()):
            continue
        if not _is_running(int(entry)):
            continue
        found.setdefault(os.fsdecode(value), []).append(int(entry))
    return found


async def terminate_processes(
    pids: Collection[int], *, grace: float = TERMINATE_GRACE_SECONDS
) -> bool:
    """Terminate the process groups the given live pids and their descendants belong to
    (SIGTERM, one shared grace, SIGKILL).

    For orphans found by :func:`find_processes_by_env`; a descendant that left both the group
    (``setsid``) and the tag (a cleared environment) is found below them. This process's own
    group, pid 1 and groups that cannot be determined are never signalled. Returns whether every
    group is gone.
    """
    own = os.getpgrp()
    every = set(pids)
    todo = list(every)
    while todo:  # and everything below them: a descendant may have left the group and the tag
        for child in _children_of(todo.pop()):
            if child not in every:
                every.add(child)
                todo.append(child)
    groups = {g for g in (process_group_of(p) for p in every) if g is not None and g > 1}
    groups.discard(own)
    results = await asyncio.gather(*(terminate_group(g, grace=grace) for g in sorted(groups)))
    return all(results)


def group_alive(pgid: int) -> bool:
    """Return whether process group ``pgid`` has a member that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True  # no /proc: the kill probe is all we know
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = _read_stat(int(entry))
        if fields is None or len(fields) < 3:
            continue
        if fields[2] == str(pgid) and fields[0] not in ("Z", "X", "x"):
            return True
    return False


def _check_pgid(pid: int) -> None:
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        raise LaunchError(f"refusing to signal process group {pid!r}")
    if pid == os.getpgrp():
        raise LaunchError(f"refusing to signal this process's own group {pid}")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _wait_gone(pgid: int, timeout: float, leader: Leader | None) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = _POLL_MIN
    while True:
        if (leader is None or leader.returncode is not None) and not group_alive(pgid):
            return True
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, _POLL_MAX)


async def terminate_group(
    pgid: int,
    *,
    grace: float = TERMINATE_GRACE_SECONDS,
    leader: Leader | None = None,
) -> bool:
    """SIGTERM the group, wait up to ``grace``, SIGKILL what is left; return whether it is gone.

    With ``leader`` (our own child) the leader is also reaped. A second cancellation during the
    grace period sends SIGKILL at once and propagates.
    """
    _check_pgid(pgid)
    _signal_group(pgid, signal.SIGTERM)
    try:
        if await _wait_gone(pgid, grace, leader):
            return True
    except asyncio.CancelledError:
        _signal_group(pgid, signal.SIGKILL)
        raise
    _signal_group(pgid, signal.SIGKILL)
    if leader is not None and leader.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            leader.kill()
    return await _wait_gone(pgid, KILL_WAIT_SECONDS, leader)


async def terminate_process_group(pid: int, *, grace: float = TERMINATE_GRACE_SECONDS) -> bool:
    """Terminate the process group led by ``pid``: SIGTERM, ``grace`` seconds, then SIGKILL.

    For crash reconciliation: check :func:`is_same_process` first, so a reused pid is never
    signalled. Returns whether the group has no live member left. Refuses pid <= 1 and the
    caller's own process group (:class:`LaunchError`).
    """
    return await terminate_group(pid, grace=grace)
