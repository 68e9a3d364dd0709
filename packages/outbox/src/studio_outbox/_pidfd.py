"""A child process watched through a pidfd on the event loop (Linux), for the argv transport.

asyncio's default child watcher on Python 3.11 starts one thread per child to wait for it,
and its subprocess transport adds a pipe-connection handshake; together they cost about as
much CPU per send as the rest of a delivery. Here the child is started with
``subprocess.Popen`` and its exit, stderr and stdin are plain event-loop readers and writers
(``os.pidfd_open``, Linux 5.3+). Where pidfds are unavailable the transport falls back to
``loop.subprocess_exec``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Mapping, Sequence

_CHUNK = 65536
_supported: bool | None = None


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


class PidfdChild:
    """One running child; the ``transport`` side of :class:`asyncio.SubprocessProtocol`.

    Calls ``protocol.pipe_data_received(2, data)`` for stderr, ``pipe_connection_lost(2,
    None)`` at stderr EOF and ``process_exited()`` once the child is reaped. Offers the few
    :class:`asyncio.SubprocessTransport` methods the transport uses.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol: asyncio.SubprocessProtocol,
        argv: Sequence[str],
        *,
        stdin_data: bytes | None,
        env: Mapping[bytes, bytes],
    ) -> None:
        self._loop = loop
        self._protocol = protocol
        self._proc = subprocess.Popen(
            list(argv),
            bufsize=0,  # only the descriptors are used: no buffered wrappers to set up
            stdin=subprocess.DEVNULL if stdin_data is None else subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=env,
        )
        self._pidfd: int | None = None
        self._stderr: int | None = None
        self._stdin: int | None = None
        self._pending = memoryview(stdin_data or b"")
        try:
            self._pidfd = os.pidfd_open(self._proc.pid)
        except OSError:
            self._proc.kill()
            self._proc.wait()
            self._close_pipes()
            raise
        loop.add_reader(self._pidfd, self._on_exit)
        assert self._proc.stderr is not None
        self._stderr = self._proc.stderr.fileno()
        os.set_blocking(self._stderr, False)
        loop.add_reader(self._stderr, self._on_stderr)
        if self._proc.stdin is not None:
            self._stdin = self._proc.stdin.fileno()
            os.set_blocking(self._stdin, False)
            self._on_stdin()
            if self._stdin is not None:
                loop.add_writer(self._stdin, self._on_stdin)

    # -- the SubprocessTransport subset --------------------------------------------------

    def get_pid(self) -> int:
        return self._proc.pid

    def get_returncode(self) -> int | None:
        return self._proc.returncode

    def kill(self) -> None:
        if self._proc.returncode is None:
            self._proc.kill()

    def close(self) -> None:
        """Stop watching the pipes; a child still running is killed and reaped when it exits."""
        self._stop_stdin()
        self._stop_stderr(notify=False)
        if self._proc.returncode is None:
            self.kill()  # as asyncio's transport does; _on_exit still reaps it
        else:
            self._stop_pidfd()

    # -- event-loop callbacks ------------------------------------------------------------

    def _on_exit(self) -> None:
        if self._proc.poll() is None:
            return  # spurious wake-up
        self._stop_pidfd()
        self._protocol.process_exited()

    def _on_stderr(self) -> None:
        assert self._stderr is not None
        try:
            data = os.read(self._stderr, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._protocol.pipe_data_received(2, data)
        else:
            self._stop_stderr(notify=True)

    def _on_stdin(self) -> None:
        assert self._stdin is not None
        try:
            while self._pending:
                written = os.write(self._stdin, self._pending)
                self._pending = self._pending[written:]
        except BlockingIOError:
            return
        except OSError:
            pass  # the child exited or closed stdin without reading: not an error here
        self._stop_stdin()

    # -- cleanup -------------------------------------------------------------------------

    def _stop_pidfd(self) -> None:
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    def _stop_stderr(self, *, notify: bool) -> None:
        if self._stderr is not None:
            self._loop.remove_reader(self._stderr)
            self._stderr = None
            if self._proc.stderr is not None:
                self._proc.stderr.close()
            if notify:
                self._protocol.pipe_connection_lost(2, None)

    def _stop_stdin(self) -> None:
        if self._stdin is not None:
            self._loop.remove_writer(self._stdin)
            self._stdin = None
            self._pending = memoryview(b"")
            if self._proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self._proc.stdin.close()

    def _close_pipes(self) -> None:
        for pipe in (self._proc.stdin, self._proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
