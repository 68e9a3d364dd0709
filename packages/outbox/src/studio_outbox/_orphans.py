"""Senders of earlier attempts of a dispatch still running after their process died.

Every transport child runs with ``LIONAGI_DISPATCH_ID`` and ``LIONAGI_DISPATCH_ATTEMPT`` in its
environment (inherited by its descendants). A row is only claimed again once the previous
claim's lease lapsed, and a live sender always ends its send (killing the transport's group)
well inside that lease; so a process that still carries an earlier attempt of the same
dispatch belongs to a sender that died (kill -9, power loss of the daemon only) and is
killed before the new attempt is sent. Linux ``/proc``; elsewhere nothing is found.
"""

from __future__ import annotations

import contextlib
import os
import signal

DISPATCH_ID_ENV = "LIONAGI_DISPATCH_ID"
DISPATCH_ATTEMPT_ENV = "LIONAGI_DISPATCH_ATTEMPT"


def _environ(pid: int) -> dict[bytes, bytes] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    env: dict[bytes, bytes] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            env.setdefault(name, value)
    return env


def earlier_senders(dispatch_id: str, attempt: int) -> list[int]:
    """Pids of live processes sending an attempt of ``dispatch_id`` below ``attempt``."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    key, want = DISPATCH_ID_ENV.encode(), dispatch_id.encode()
    attempt_key = DISPATCH_ATTEMPT_ENV.encode()
    me = os.getpid()
    found = []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        env = _environ(int(entry))
        if not env or env.get(key) != want:
            continue
        try:
            theirs = int(env.get(attempt_key, b"0"))
        except ValueError:
            continue
        if theirs < attempt:
            found.append(int(entry))
    return found


def kill_earlier_senders(dispatch_id: str, attempt: int) -> int:
    """SIGKILL the process groups of earlier attempts' orphaned senders; return how many."""
    pids = earlier_senders(dispatch_id, attempt)
    own = os.getpgrp()
    for pid in pids:
        with contextlib.suppress(OSError):
            group = os.getpgid(pid)
            if group > 1 and group != own:
                os.killpg(group, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
    return len(pids)
