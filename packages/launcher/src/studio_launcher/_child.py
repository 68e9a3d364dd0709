"""One child process whose exit the event loop watches through a pidfd.

asyncio's ``create_subprocess_exec`` on Python 3.11 starts a waiter thread per child and builds
a subprocess transport around it; at hundreds of fires per second that was most of the cost of
a spawn. Here the child is started with :class:`subprocess.Popen` and its exit is an event-loop
reader on ``os.pidfd_open(pid)`` (Linux 5.3+).

A pidfd reports the exit *without reaping* the child. While the exited child is an unreaped
zombie its pid, and so its process-group id, cannot be given to another process, so the
launcher can still signal the group safely before it collects the exit status. Where pidfds are
unavailable (an old kernel, a sandbox that forbids the call) a thread waits with
``waitid(WNOWAIT)``, which does not reap either.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading

_supported: bool | None = None

LEADERS: set[int] = set()
"""Pids of children this module started and has not reaped yet (never an adopted orphan)."""


def pidfd_supported() -> bool:
    """Whether ``os.pidfd_open`` works here (probed once: a sandbox may forbid the call)."""
    global _supported
    if _supported is None:
        try:
            fd = os.pidfd_open(os.getpid())
        except (AttributeError, OSError):
            _supported = False
        else:
            os.close(fd)
            _supported = True
    return _supported


class Child:
    """A started child: ``await wait_exited()``, then :meth:`reap` for its exit status.

    With ``auto_reap`` the exit status is collected as soon as the exit is seen (what asyncio's
    watcher did), so :attr:`returncode` becomes set without a :meth:`reap` call.
    """

    def __init__(self, proc: subprocess.Popen[bytes], *, auto_reap: bool) -> None:
        self._proc = proc
        self.pid = proc.pid
        self._auto_reap = auto_reap
        self._loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[None] = self._loop.create_future()
        self._pidfd: int | None = None
        LEADERS.add(self.pid)
        if pidfd_supported():
            with contextlib.suppress(OSError):
                self._pidfd = os.pidfd_open(self.pid)
        if self._pidfd is not None:
            self._loop.add_reader(self._pidfd, self._on_exit)
        else:
            threading.Thread(
                target=self._wait_in_thread, name=f"studio-launcher-wait-{self.pid}", daemon=True
            ).start()

    @property
    def returncode(self) -> int | None:
        """The exit status once reaped (negative: killed by that signal), else ``None``."""
        return self._proc.returncode

    @property
    def exited(self) -> bool:
        """Whether the child has exited (it may still be an unreaped zombie)."""
        return self._exited.done()

    async def wait_exited(self) -> None:
        """Return once the child has exited; cancelling the caller does not stop the watch."""
        await asyncio.shield(self._exited)

    def reap(self) -> int:
        """Collect the exit status of an exited child (idempotent)."""
        if self._proc.returncode is None:
            self._proc.wait()
            LEADERS.discard(self.pid)
            self._close_pidfd()
        returncode = self._proc.returncode
        assert returncode is not None
        return returncode

    def kill(self) -> None:
        """SIGKILL the child unless it was reaped (its pid is ours until then)."""
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def close(self) -> None:
        """Stop watching (the child keeps running if it has not exited)."""
        self._close_pidfd()

    def _on_exit(self) -> None:
        self._close_pidfd()
        self._mark_exited()

    def _mark_exited(self) -> None:
        if self._auto_reap:
            self.reap()
        if not self._exited.done():
            self._exited.set_result(None)

    def _wait_in_thread(self) -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._mark_exited)

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
