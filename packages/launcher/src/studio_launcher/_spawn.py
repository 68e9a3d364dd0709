"""Running one child: no shell, its own session, a bounded stderr tail, group teardown.

stderr is read from a pipe this module owns (not an asyncio transport pipe), and the child's
exit is watched through a pidfd, so completion is the child's exit: a grandchild that keeps the
pipe open cannot hold a run open.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import os
import subprocess
from collections.abc import Awaitable, Callable, Mapping
from subprocess import Popen

from ._child import Child
from ._descendants import enable_subreaper, end_run
from ._exceptions import DeadlineExceeded, InvalidAction, SpawnFailed
from ._process import terminate_group
from ._runlog import RUN_LOG_BYTES, RunLog, check_log_args

logger = logging.getLogger("studio_launcher")

STDERR_TAIL_BYTES = 2048
"""How many trailing bytes of the child's stderr are kept."""

INVOCATION_ENV = "LIONAGI_INVOCATION_ID"
"""Set in every child's environment to the invocation id."""

OnSpawn = Callable[[int], Awaitable[object] | object]
"""``on_spawn(pid)``: called once the child exists; may be a plain or an async function."""

_READ_CHUNK = 65536
_DRAIN_READS = 64  # bound on reads after exit: a grandchild may keep writing forever


class _PipeReader:
    """Reads a non-blocking pipe from the event loop: keeps its last ``keep`` bytes and passes
    every chunk to ``sink`` (the run log)."""

    def __init__(
        self, fd: int, keep: int = STDERR_TAIL_BYTES, sink: Callable[[bytes], None] | None = None
    ) -> None:
        self._fd = fd
        self._limit = keep
        self._sink = sink
        self._buf = bytearray()
        self._loop = asyncio.get_running_loop()
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._read_available, 16)
        self._reading = True

    def _stop(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def _read_available(self, max_reads: int) -> None:
        for _ in range(max_reads):
            try:
                chunk = os.read(self._fd, _READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                self._stop()
                return
            if not chunk:  # EOF: every writer has closed the pipe
                self._stop()
                return
            if self._sink is not None:
                self._sink(chunk)
            if self._limit:
                self._buf += chunk
                if len(self._buf) > self._limit:
                    del self._buf[: -self._limit]

    def drain(self) -> None:
        """Stop reading after taking what the pipe already holds (bounded: a grandchild may
        keep writing forever)."""
        if self._reading:
            self._stop()
            self._read_available(_DRAIN_READS)

    def text(self) -> str:
        """Drain, and return the kept tail as text."""
        self.drain()
        return bytes(self._buf).decode("utf-8", errors="replace")

    def close(self) -> None:
        self._stop()
        with contextlib.suppress(OSError):
            os.close(self._fd)


def _check_inputs(
    argv: list[str],
    invocation_id: str,
    env: Mapping[str, str] | None,
    deadline_seconds: float | None,
) -> None:
    if not isinstance(argv, (list, tuple)) or not argv:
        raise InvalidAction("argv", "must be a non-empty list of strings")
    for index, item in enumerate(argv):
        if not isinstance(item, str):
            raise InvalidAction(
                "argv", f"element {index} must be a string, got {type(item).__name__}"
            )
    if not isinstance(invocation_id, str) or not invocation_id or "\x00" in invocation_id:
        raise InvalidAction("invocation_id", "must be a non-empty string", value=invocation_id)
    if env is not None:
        for key, value in env.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise InvalidAction("env", f"names and values must be strings ({key!r})")
    if deadline_seconds is not None and (
        isinstance(deadline_seconds, bool)
        or not isinstance(deadline_seconds, (int, float))
        or not math.isfinite(deadline_seconds)
        or deadline_seconds <= 0
    ):
        raise InvalidAction(
            "deadline_seconds", "must be a positive finite number or None", value=deadline_seconds
        )


async def _call_on_spawn(on_spawn: OnSpawn | None, pid: int) -> None:
    if on_spawn is None:
        return
    try:
        result = on_spawn(pid)
        if inspect.isawaitable(result):
            await result
    except Exception:
        # The child is running: a bookkeeping failure must not orphan or kill it.
        logger.exception("on_spawn(%d) failed; the child keeps running", pid)


def _exec(
    argv: list[str], cwd: str | None, env: dict[str, str], stderr_fd: int, stdout_fd: int | None
) -> Popen[bytes]:
    try:
        return Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL if stdout_fd is None else stdout_fd,
            stderr=stderr_fd,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        raise SpawnFailed(
            argv[0],
            exc.strerror or str(exc),
            errno=exc.errno,
            filename=None if exc.filename is None else os.fsdecode(exc.filename),
        ) from exc
    except ValueError as exc:  # e.g. "embedded null byte"
        raise SpawnFailed(argv[0], str(exc)) from exc


async def spawn_and_wait(
    argv: list[str],
    invocation_id: str,
    *,
    tmp_path: str | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    deadline_seconds: float | None = None,
    on_spawn: OnSpawn | None = None,
    kill_descendants: bool = False,
    log_path: str | os.PathLike[str] | None = None,
    log_bytes: int = RUN_LOG_BYTES,
) -> tuple[int, str]:
    """Run ``argv`` to completion and return ``(exit_code, stderr_tail)``.

    No shell; stdin is ``/dev/null`` and so is stdout unless ``log_path`` is given; the last
    2048 bytes of stderr are returned
    (decoded as UTF-8 with replacement); the child leads its own session and process group. Its
    environment is ``env`` (default: this process's) plus ``LIONAGI_INVOCATION_ID``.
    ``on_spawn(pid)`` (sync or async) is called once the process exists; its exceptions are
    logged, not raised. The call returns when the child exits, even if a grandchild still
    holds stderr; a negative exit code means the child died of that signal.

    On cancellation or when ``deadline_seconds`` pass, the whole process group gets SIGTERM,
    5 s grace, then SIGKILL, and :class:`asyncio.CancelledError` / :class:`DeadlineExceeded` is
    raised.

    ``kill_descendants=False`` (the default) leaves descendants that are still running when the
    child exits alone, and ends only the process group on cancellation or deadline. With
    ``True``, no process outlives the run: this process becomes a child subreaper (once,
    process-wide; see :func:`enable_subreaper`) and, when the child exits, is cancelled or
    passes its deadline, every descendant (its group, and those that left it with ``setsid``
    or by daemonising, found by ``LIONAGI_INVOCATION_ID``) gets SIGTERM, 5 s grace, SIGKILL,
    and the adopted ones are reaped before the call returns or raises.

    ``log_path``: the child's stdout and stderr are also written to this file (parent directory
    created 0700 if missing, file created or truncated, mode 0600), in the order they are read,
    bounded by ``log_bytes`` (default 1 MiB): the first 64 KiB (half the bound below 128 KiB),
    a marker line ``[... N bytes dropped ...]`` and the most recent output, all within the
    bound. The file can be read while the child runs; when the bound is reached the tail after
    the head is rewritten in place, so the file shrinks (a follower then re-reads from the end
    of the head). A file that cannot be created raises :class:`SpawnFailed` (nothing runs).

    If exec fails (missing file, permission, E2BIG, missing cwd) :class:`SpawnFailed` is raised
    and nothing runs. ``tmp_path`` is removed in every case.
    """
    try:
        _check_inputs(argv, invocation_id, env, deadline_seconds)
        check_log_args(log_path, log_bytes)
        child_env = dict(os.environ if env is None else env)
        child_env[INVOCATION_ENV] = invocation_id
        log = None if log_path is None else RunLog(log_path, log_bytes)
        pipes: list[_PipeReader] = []
        write_fds: list[int] = []
        try:
            sink = None if log is None else log.write
            stderr_w = _open_pipe(pipes, write_fds, STDERR_TAIL_BYTES, sink)
            stdout_w = None if log is None else _open_pipe(pipes, write_fds, 0, log.write)
            if kill_descendants:
                enable_subreaper()  # before the child exists, so nothing it orphans goes to init
            try:
                proc = _exec(list(argv), cwd, child_env, stderr_w, stdout_w)
            finally:
                for fd in write_fds:  # the child has its copies: EOF means every writer is gone
                    os.close(fd)
                write_fds.clear()
            child = Child(proc, auto_reap=not kill_descendants)
            try:
                return await _supervise(
                    child, pipes, invocation_id, deadline_seconds, on_spawn, kill_descendants
                )
            finally:
                child.close()
        finally:
            for fd in write_fds:
                os.close(fd)
            for pipe in pipes:
                pipe.close()
            if log is not None:
                log.close()
    finally:
        if tmp_path:
            with contextlib.suppress(OSError):
                os.unlink(tmp_path)


def _open_pipe(
    pipes: list[_PipeReader],
    write_fds: list[int],
    keep: int,
    sink: Callable[[bytes], None] | None,
) -> int:
    read_fd, write_fd = os.pipe()
    write_fds.append(write_fd)
    try:
        pipes.append(_PipeReader(read_fd, keep, sink))
    except BaseException:
        os.close(read_fd)
        raise
    return write_fd


def _output(pipes: list[_PipeReader]) -> str:
    """Drain every pipe into the log, then return the stderr tail (the first pipe's)."""
    for pipe in pipes:
        pipe.drain()
    return pipes[0].text()


async def _teardown(child: Child, invocation_id: str, kill_descendants: bool) -> None:
    if kill_descendants:
        await end_run(INVOCATION_ENV, invocation_id, child)
    else:
        await terminate_group(child.pid, leader=child)


async def _supervise(
    child: Child,
    pipes: list[_PipeReader],
    invocation_id: str,
    deadline_seconds: float | None,
    on_spawn: OnSpawn | None,
    kill_descendants: bool,
) -> tuple[int, str]:
    pid = child.pid
    logger.debug("invocation %s: started pid %d", invocation_id, pid)
    loop = asyncio.get_running_loop()
    deadline_at = None if deadline_seconds is None else loop.time() + deadline_seconds
    try:
        async with asyncio.timeout_at(deadline_at):
            await _call_on_spawn(on_spawn, pid)
            await child.wait_exited()
    except TimeoutError:
        assert deadline_seconds is not None
        logger.warning(
            "invocation %s: pid %d exceeded its %gs deadline; terminating its process group",
            invocation_id,
            pid,
            deadline_seconds,
        )
        await _teardown(child, invocation_id, kill_descendants)
        raise DeadlineExceeded(invocation_id, deadline_seconds, _output(pipes)) from None
    except asyncio.CancelledError:
        logger.warning("invocation %s: cancelled; terminating process group %d", invocation_id, pid)
        await _teardown(child, invocation_id, kill_descendants)
        _output(pipes)  # the last output reaches the log
        raise
    if kill_descendants:
        await end_run(INVOCATION_ENV, invocation_id, child)
    returncode = child.reap()
    logger.debug("invocation %s: pid %d exited with %d", invocation_id, pid, returncode)
    return returncode, _output(pipes)
