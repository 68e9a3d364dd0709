"""Who holds a claim, and whether that sender is still alive.

A claim records its sender (``claimed_by``: boot id, pid and process start time). When a
``delivering`` row's lease lapses, another scanner may only send it again once the sender is
gone: a live sender whose outcome write waits behind another process's write lock would
otherwise see its send repeated. A sender on another machine (another boot id) cannot be
checked, so its lease alone decides; so does a sender that has held the row for
:data:`LIVE_SENDER_GRACE_SECONDS` past its lease (a wedged process must not block a row
forever).
"""

from __future__ import annotations

import functools
import os
from typing import Final

LIVE_SENDER_GRACE_SECONDS: Final = 300.0

# Claims held by delivery loops of this process: (dispatch id, attempt).
_held: set[tuple[str, int]] = set()
_identity: dict[int, str] = {}


@functools.cache
def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # Field 22 (starttime); the command name (field 2) may contain spaces, so split after it.
    fields = stat.rsplit(b")", 1)[-1].split()
    return fields[19].decode() if len(fields) > 19 else None


def identity() -> str:
    """This process as a claimant: ``boot_id:pid:start_ticks`` (empty parts off Linux)."""
    pid = os.getpid()
    found = _identity.get(pid)
    if found is None:
        found = _identity[pid] = f"{_boot_id()}:{pid}:{_start_ticks(pid) or ''}"
    return found


def hold(dispatch_id: str, attempt: int) -> None:
    """Mark a claim as held by a live loop of this process."""
    _held.add((dispatch_id, attempt))


def release(dispatch_id: str, attempt: int) -> None:
    """The loop holding this claim recorded its outcome or stopped."""
    _held.discard((dispatch_id, attempt))


def sender_alive(claimed_by: str | None, dispatch_id: str, attempt: int) -> bool:
    """Whether the sender that claimed ``attempt`` of the row is known to be still running."""
    if not claimed_by:
        return False
    boot, _, rest = claimed_by.partition(":")
    pid_text, _, ticks = rest.partition(":")
    if not boot or not ticks or boot != _boot_id() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return (dispatch_id, attempt) in _held
    return _start_ticks(pid) == ticks
