"""Ending every descendant of a run, also those that left its process group.

A child may ``setsid`` or daemonise (fork, ``setsid``, fork again, exit). Its descendants then
leave the run's process group, and when their parent exits the kernel hands them to the nearest
ancestor that is a *child subreaper*, or else to init. Signalling the group misses them.

Why a subreaper in this process, and not a small supervisor per child: a Python supervisor
costs about 20 ms of CPU per spawn, and the scheduler fires hundreds of children per second.
Marking the spawning process itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``: no
privileges, process-wide, idempotent) costs one system call per process. Escaped descendants
then become this process's own children, so when a run ends the launcher reads only
``/proc/self/task/*/children`` (not all of ``/proc``) and takes those children that carry the
run's tag in their environment (``LIONAGI_INVOCATION_ID``, which every child inherits, or
another name such as ``LIONAGI_DISPATCH_ID``) or are still in the run's process group, plus
every process below them and below the leader. They get SIGTERM, one shared grace period, then
SIGKILL; new ones that appear meanwhile are found on the next look.

Reaping without stealing: this process's other children are waited for by asyncio, by
``subprocess.Popen`` objects or by other code, each by its pid. The launcher never calls
``waitpid(-1)``; it reaps (by pid) only zombies it can prove were adopted: processes it saw
alive as the run's descendants (same pid and start time), members of the run's process group
other than the leader, and children whose session is neither their own nor this process's (a
child this process forked either stays in this process's session or leads its own). A zombie
that leads its own session (the middle process of a daemonising double fork) is reaped once it
has stayed a zombie for 0.2 s with no pidfd in this process on it: owners here reap their
children at once (a waiting thread) or hold a pidfd on them until they do.

Limits: a descendant that clears its environment, leaves the group and is orphaned to this
process between two looks is not recognised. Code in this process that starts a child in a
new session and neither waits for it nor holds a pidfd on it may have its exit status taken.
Where ``prctl`` is unavailable, tagged processes are looked for in all of ``/proc`` instead
(slower; init reaps them).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import time
from typing import NamedTuple

from ._child import LEADERS, Child
from ._process import (
    KILL_WAIT_SECONDS,
    TERMINATE_GRACE_SECONDS,
    _children_of,
    _environ,
    _read_stat,
    _task_children,
    find_processes_by_env,
)

logger = logging.getLogger("studio_launcher")

_PR_SET_CHILD_SUBREAPER = 36
_POLL_MIN = 0.005
_POLL_MAX = 0.05
_subreaper_pid: int | None = None  # the pid that made itself a subreaper (not inherited by fork)
_subreaper_ok = False
_SUSPECT_AGE = 0.2  # seconds a session-leader zombie stays unclaimed before it counts as adopted
_suspects: dict[int, tuple[int, float]] = {}  # pid -> (start time, first seen as a zombie)


def enable_subreaper() -> bool:
    """Make this process a child subreaper (once per process); return whether it is one.

    Orphaned descendants of this process's children are then re-parented to this process
    instead of init, so :func:`terminate_descendants` can find them. Needs no privileges.
    """
    global _subreaper_pid, _subreaper_ok
    pid = os.getpid()
    if _subreaper_pid != pid:
        _subreaper_pid = pid
        try:
            prctl = ctypes.CDLL(None, use_errno=True).prctl
            prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
            prctl.restype = ctypes.c_int
            _subreaper_ok = prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            _subreaper_ok = False
        if not _subreaper_ok:
            logger.warning(
                "cannot make this process a child subreaper; escaped descendants are "
                "looked for in all of /proc instead"
            )
    return _subreaper_ok


class _Stat(NamedTuple):
    state: str
    pgrp: int
    session: int
    start: int


def _stat(pid: int) -> _Stat | None:
    fields = _read_stat(pid)
    if fields is None or len(fields) < 20:
        return None
    try:
        return _Stat(fields[0], int(fields[2]), int(fields[3]), int(fields[19]))
    except ValueError:
        return None


def _dead(info: _Stat | None) -> bool:
    return info is None or info.state in ("Z", "X", "x")


def _adopted_candidates() -> list[int]:
    """This process's children that may have been adopted: the kernel gives orphans to the
    subreaper's first live thread, the main one, so its list is enough while it lives."""
    me = os.getpid()
    main = _task_children(me, me)
    return _children_of(me) if main is None else main


def _tagged(pid: int, name: bytes, value: bytes) -> bool:
    env = _environ(pid)
    return env is not None and env.get(name) == value


class _Sweep:
    """What one run's teardown has seen: ``claimed`` maps pid -> start time (clock ticks)."""

    def __init__(self, name: str, value: str, leader: Child | None) -> None:
        self.name = os.fsencode(name)
        self.value = os.fsencode(value)
        self.leader = leader
        self.subreaper = enable_subreaper()
        self.claimed: dict[int, int] = {}
        self._since: int | None = None

    @property
    def group(self) -> int | None:
        """The run's process-group id while the leader is unreaped (its id cannot be reused)."""
        if self.leader is None or self.leader.returncode is not None:
            return None
        return self.leader.pid

    def _is_root(self, pid: int, info: _Stat) -> bool:
        if info.pgrp == self.group:
            return True
        if self._since is None:  # read only when needed: most runs leave no child behind
            leader_stat = None if self.leader is None else _stat(self.leader.pid)
            self._since = 0 if leader_stat is None else leader_stat.start
        return info.start >= self._since and _tagged(pid, self.name, self.value)

    def find(self) -> dict[int, int]:
        """Live descendants of the run not claimed before (and claim them); reaps adopted
        zombies on the way."""
        roots: list[int] = []
        leader = None if self.leader is None else self.leader.pid
        children = _own_children(leader)
        _reap_adopted(self.claimed, self.group, children)
        for pid, info in children:
            if not _dead(info) and self._is_root(pid, info):
                roots.append(pid)
        if not self.subreaper:
            for pids in find_processes_by_env(
                os.fsdecode(self.name), {os.fsdecode(self.value)}
            ).values():
                roots.extend(p for p in pids if p != leader)
        if leader is not None and self.leader is not None and not self.leader.exited:
            roots.extend(_children_of(leader))
        for pid, start in self.claimed.items():  # look below them again: they may have forked
            known = _stat(pid)
            if known is not None and known.start == start and not _dead(known):
                roots.extend(_children_of(pid))
        seen: dict[int, int] = {}
        while roots:
            pid = roots.pop()
            if pid in seen or pid == leader:
                continue
            found = _stat(pid)
            if found is None or _dead(found):
                continue
            seen[pid] = found.start
            roots.extend(_children_of(pid))
        new = {p: s for p, s in seen.items() if self.claimed.get(p) != s}
        self.claimed.update(new)
        return new

    def alive(self) -> bool:
        if self.leader is not None and not self.leader.exited:
            return True
        for pid, start in self.claimed.items():
            info = _stat(pid)
            if info is not None and info.start == start and not _dead(info):
                return True
        return False

    def reap(self) -> None:
        """Reap this process's zombie children that were provably adopted (never by -1)."""
        leader = None if self.leader is None else self.leader.pid
        _reap_adopted(self.claimed, self.group, _own_children(leader))

    def signal(self, targets: dict[int, int], sig: signal.Signals) -> None:
        if self.group is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.group, sig)
        for pid, start in targets.items():
            _signal_exact(pid, start, sig)


def _pidfd_pids() -> set[int]:
    """Pids that some pidfd open in this process refers to (their owners reap them)."""
    pids: set[int] = set()
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return pids
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:[pidfd]":
                continue
            with open(f"/proc/self/fdinfo/{fd}", "rb") as handle:
                for line in handle:
                    if line.startswith(b"Pid:"):
                        pids.add(int(line.split()[1]))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def _own_children(leader: int | None) -> list[tuple[int, _Stat]]:
    """This process's children other than the launcher's own unreaped leaders, with their stat."""
    found = []
    for pid in _adopted_candidates():
        if pid == leader or pid in LEADERS:
            continue
        info = _stat(pid)
        if info is not None:
            found.append((pid, info))
    return found


def _recheck() -> None:
    _reap_adopted({}, None, _own_children(None))


def _reap_adopted(
    claimed: dict[int, int], group: int | None, children: list[tuple[int, _Stat]]
) -> None:
    session = os.getsid(0)
    now = time.monotonic()
    holders: set[int] | None = None
    recheck = False
    for pid, info in children:
        if info.state != "Z":
            continue
        adopted = (
            claimed.get(pid) == info.start
            or (group is not None and info.pgrp == group)
            or info.session not in (pid, session)
        )
        if not adopted and info.session == pid:
            # A session leader: forked here with start_new_session, or adopted after it
            # ran setsid (the middle process of a daemonising double fork). Owners here reap
            # theirs at once (a waiting thread) or hold a pidfd on it until they do, so one
            # that stays a zombie, unheld, for a while is an orphan nobody else will reap.
            first = _suspects.setdefault(pid, (info.start, now))
            if first[0] != info.start:
                _suspects[pid] = (info.start, now)
            elif now - first[1] >= _SUSPECT_AGE:
                holders = _pidfd_pids() if holders is None else holders
                adopted = pid not in holders
            recheck = recheck or not adopted
        if adopted:
            _suspects.pop(pid, None)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
    for pid in [p for p in _suspects if _stat(p) is None]:
        del _suspects[pid]
    if recheck:
        with contextlib.suppress(RuntimeError):  # no running loop: the next sweep looks again
            asyncio.get_running_loop().call_later(_SUSPECT_AGE, _recheck)


def _signal_exact(pid: int, start: int, sig: signal.Signals) -> None:
    """Signal ``pid`` only if it is still the process that started at ``start``."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        fd = None  # gone, or pidfds unavailable (then a plain kill after the check)
    try:
        info = _stat(pid)
        if info is None or info.start != start:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if fd is not None:
                signal.pidfd_send_signal(fd, sig)
            else:
                os.kill(pid, sig)
    finally:
        if fd is not None:
            os.close(fd)


async def _wait(sweep: _Sweep, timeout: float, sig: signal.Signals) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = _POLL_MIN
    while True:
        sweep.signal(sweep.find(), sig)  # newcomers: adopted or forked since the last look
        if sweep.leader is not None and sweep.leader.exited:
            sweep.leader.reap()  # after that look: it still counted the group's members
        if not sweep.alive():
            sweep.reap()  # the last ones may have died since that look
            return True
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, _POLL_MAX)


async def end_run(
    env_name: str, env_value: str, leader: Child | None, *, grace: float = TERMINATE_GRACE_SECONDS
) -> bool:
    """SIGTERM the run's group and descendants, ``grace`` seconds, SIGKILL; reap what was ours.

    ``leader`` (if any) is reaped too once it has exited. Returns whether nothing is left. A
    cancellation during the grace period sends SIGKILL at once and propagates.
    """
    sweep = _Sweep(env_name, env_value, leader)
    sweep.signal(sweep.find(), signal.SIGTERM)
    if leader is not None and leader.exited:
        leader.reap()  # after the group signal: until now its id could not be reused
    if not sweep.claimed and (leader is None or leader.returncode is not None):
        return True  # the common case: the run left nothing behind
    try:
        if await _wait(sweep, grace, signal.SIGTERM):
            return True
    except asyncio.CancelledError:
        sweep.signal(dict(sweep.claimed), signal.SIGKILL)
        if leader is not None:
            leader.kill()
            if leader.exited:
                leader.reap()
        raise
    sweep.signal(dict(sweep.claimed), signal.SIGKILL)
    if leader is not None:
        leader.kill()
    gone = await _wait(sweep, KILL_WAIT_SECONDS, signal.SIGKILL)
    if not gone:
        logger.warning("processes tagged %s=%s survived SIGKILL", env_name, env_value)
    return gone


async def terminate_descendants(
    env_name: str, env_value: str, *, grace: float = TERMINATE_GRACE_SECONDS
) -> bool:
    """End every descendant of this process tagged ``env_name=env_value`` and all below them.

    For runs whose leader already exited (e.g. an outbox transport tagged with
    ``LIONAGI_DISPATCH_ID``): SIGTERM, ``grace`` seconds, SIGKILL, and the adopted ones are
    reaped. Call :func:`enable_subreaper` before starting the children, or escaped ones are
    re-parented to init and looked for in all of ``/proc``. Returns whether none is left.
    """
    return await end_run(env_name, env_value, None, grace=grace)
