"""Errors raised by studio-launcher.

LaunchError (ValueError)
 ├── InvalidAction        a schedule field would not make a safe argv (``.field`` names it)
 ├── ExecutableNotFound   no absolute ``li`` executable could be resolved
 ├── CwdUnavailable       the row's own working directory no longer exists
 ├── SpawnFailed          exec failed (ENOENT, EACCES, E2BIG …): nothing ran
 └── DeadlineExceeded     (also a TimeoutError) the child ran past its deadline and was terminated
"""

from __future__ import annotations


class LaunchError(ValueError):
    """Base class of every studio-launcher error."""


class InvalidAction(LaunchError):
    """A schedule field (or launch argument) is refused before anything is written or spawned.

    ``field`` is the schedule column (``action_model``, ``action_extra_args`` …) or argument name
    at fault; ``value`` is the offending value when it is short enough to be useful.
    """

    def __init__(self, field: str, message: str, *, value: object = None) -> None:
        self.field = field
        self.value = value
        self.reason = message
        super().__init__(f"{field}: {message}")


class ExecutableNotFound(LaunchError):
    """No absolute path to the ``li`` executable could be resolved; ``detail`` lists each try."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"cannot resolve an absolute path to the `li` executable: {detail}")


class CwdUnavailable(LaunchError):
    """The schedule's own execution root (``action_cwd``) is not a usable directory any more.

    The engine records such a fire as ``run.failed.missing_cwd``.
    """

    def __init__(self, path: str, message: str, *, field: str = "action_cwd") -> None:
        self.path = path
        self.field = field
        super().__init__(f"{field} {path!r} {message}")


class SpawnFailed(LaunchError):
    """The operating system refused to start the child; no process exists.

    ``errno``/``strerror``/``filename`` come from the underlying :class:`OSError` (``errno`` is
    ``None`` when the argv itself was unusable, e.g. an embedded NUL byte).
    """

    def __init__(
        self,
        executable: str,
        strerror: str,
        *,
        errno: int | None = None,
        filename: str | None = None,
    ) -> None:
        self.executable = executable
        self.errno = errno
        self.strerror = strerror
        self.filename = filename
        where = f" ({filename!r})" if filename and filename != executable else ""
        code = f"[Errno {errno}] " if errno is not None else ""
        super().__init__(f"cannot start {executable!r}: {code}{strerror}{where}")


class DeadlineExceeded(LaunchError, TimeoutError):
    """The child outlived ``deadline_seconds``; its process group was terminated.

    Carries ``invocation_id``, ``deadline_seconds`` and the ``stderr_tail`` read so far.
    """

    def __init__(self, invocation_id: str, deadline_seconds: float, stderr_tail: str = "") -> None:
        self.invocation_id = invocation_id
        self.deadline_seconds = deadline_seconds
        self.stderr_tail = stderr_tail
        super().__init__(
            f"invocation {invocation_id} exceeded its {deadline_seconds:g}s deadline; "
            "its process group was terminated"
        )
