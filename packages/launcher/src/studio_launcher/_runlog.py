"""The run log: a child's stdout and stderr in one bounded file that can be read while it grows.

The file holds the output as written until it would pass its bound. From then on it holds the
first ``head`` bytes (64 KiB, or half the bound below 128 KiB), one marker line naming how many
bytes were dropped, and the most recent output; the marker counts toward the bound.

Keeping "the most recent" in a file that readers follow: rewriting the tail on every write
would cost the whole bound per chunk. Instead the recent output is also kept in memory (at most
the bound), the file grows by plain appends, and only when an append would pass the bound is
the tail rewritten in place (after the head: marker, then the newest half of the room), so the
rewrite cost is spread over half a bound of new output. When the run ends the tail is rewritten
once more with all the room filled. A reader following the file sees appends as they are
written; after a rewrite during the run the file is shorter than what a caught-up reader has
read, which is its sign to read again from the end of the head (the marker line). The last
rewrite, when the run ends, may make it longer again (only for output that passed the bound):
a reader that wants the final content reads the file again once the run has ended.

The file is created with the first byte of output: a run that prints nothing leaves none.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os

from ._exceptions import InvalidAction, SpawnFailed

logger = logging.getLogger("studio_launcher")

RUN_LOG_BYTES = 1024 * 1024
"""Default bound of a run log (bytes, marker included)."""

RUN_LOG_HEAD_BYTES = 64 * 1024
"""Bytes kept from the start of the output (half the bound when the bound is below 128 KiB)."""

MIN_RUN_LOG_BYTES = 1024
"""The smallest bound accepted: room for a head, the marker line and some recent output."""

MAX_RUN_LOG_BYTES = 1 << 40


def marker_line(dropped: int) -> bytes:
    """The line that replaces ``dropped`` bytes of output."""
    return b"\n[... %d bytes dropped ...]\n" % dropped


_MARKER_MAX = len(marker_line(10**20))


def head_bytes(bound: int) -> int:
    """How many bytes from the start of the output a log bounded by ``bound`` keeps."""
    return RUN_LOG_HEAD_BYTES if bound >= 2 * RUN_LOG_HEAD_BYTES else bound // 2


def check_log_args(log_path: object, log_bytes: object) -> None:
    """Refuse a bad ``log_path`` / ``log_bytes`` (:class:`InvalidAction` naming the argument)."""
    if log_path is not None:
        if not isinstance(log_path, (str, os.PathLike)):
            raise InvalidAction("log_path", "must be a path or None")
        text = os.fspath(log_path)
        if not isinstance(text, str) or not text or "\x00" in text:
            raise InvalidAction("log_path", "must be a non-empty path without NUL", value=text)
    if (
        isinstance(log_bytes, bool)
        or not isinstance(log_bytes, int)
        or not MIN_RUN_LOG_BYTES <= log_bytes <= MAX_RUN_LOG_BYTES
    ):
        raise InvalidAction(
            "log_bytes",
            f"must be an integer from {MIN_RUN_LOG_BYTES} to {MAX_RUN_LOG_BYTES}",
            value=log_bytes,
        )


class RunLog:
    """One run's bounded log file, written from the event loop (every call is non-blocking I/O
    on a regular file: page-cache writes, no fsync)."""

    def __init__(self, path: str | os.PathLike[str], bound: int) -> None:
        self.path = os.fspath(path)
        self.bound = bound
        self.head = head_bytes(bound)
        self._room = bound - self.head - _MARKER_MAX  # recent bytes that fit beside the marker
        self._recent = bytearray()  # the newest output after the head, at most bound - head
        self.size = 0  # bytes in the file
        self.total = 0  # bytes of output received
        self.dropped = 0
        self._broken = False
        self._fd: int | None = None
        self._closed = False
        # The file is created on the first output: most runs print nothing, and creating a
        # file is the dearest step of a spawn on a busy disk. Whether it can be created is
        # checked now, so an unwritable directory still fails the spawn before the child runs.
        directory = os.path.dirname(self.path) or "."
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            if not os.access(directory, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), directory)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)  # a stale log at this path is not this run's output
        except OSError as exc:
            raise SpawnFailed(
                "run log", exc.strerror or str(exc), errno=exc.errno, filename=self.path
            ) from exc

    def _open(self) -> int | None:
        if self._fd is None and not self._broken and not self._closed:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
            try:
                self._fd = os.open(self.path, flags, 0o600)
                os.fchmod(self._fd, 0o600)
            except OSError as exc:
                self._broken = True  # the run goes on without its log
                logger.warning("run log %s: cannot be created (%s)", self.path, exc)
        return self._fd

    def write(self, data: bytes) -> None:
        """Add output; the file never passes the bound."""
        if not data or self._open() is None:
            return
        self.total += len(data)
        if self.size < self.head:  # the head is written once, never rewritten
            part = data[: self.head - self.size]
            self._pwrite(part, self.size)
            self.size += len(part)
            data = data[len(part) :]
            if not data:
                return
        self._recent += data
        if len(self._recent) > self.bound - self.head:
            del self._recent[: len(self._recent) - (self.bound - self.head)]
        if self.size + len(data) <= self.bound:
            self._pwrite(data, self.size)
            self.size += len(data)
        else:
            self._rewrite_tail(max(1, self._room // 2))

    def _rewrite_tail(self, keep: int) -> None:
        keep = min(keep, len(self._recent))
        self.dropped = self.total - self.head - keep
        tail = marker_line(self.dropped) + self._recent[len(self._recent) - keep :]
        self._pwrite(tail, self.head)
        self.size = self.head + len(tail)
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self.size)

    def _pwrite(self, data: bytes | bytearray, offset: int) -> None:
        if self._fd is None or self._broken:
            return
        view = memoryview(data)
        try:
            while view:
                written = os.pwrite(self._fd, view, offset)
                view = view[written:]
                offset += written
        except OSError as exc:
            self._broken = True  # e.g. disk full: the run goes on, its log stops here
            logger.warning("run log %s: write failed (%s); logging stops", self.path, exc)

    def close(self) -> None:
        """Fill the room with the newest output (if some was dropped) and close the file."""
        self._closed = True
        if self._fd is None:
            return
        if self.dropped:
            self._rewrite_tail(self._room)
        os.close(self._fd)
        self._fd = None
