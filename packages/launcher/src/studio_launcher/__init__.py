"""studio-launcher: the subprocess trust boundary of Studio.

Stored, user-supplied schedule fields become a child's argv, cwd and environment here:
:func:`validate_action` and :func:`build_argv` refuse anything that could inject a flag or fail
at exec, :func:`resolve_cwd` picks the working directory, :func:`spawn_and_wait` runs the child
without a shell in its own process group and tears the group down on cancellation or deadline,
with ``kill_descendants=True`` also every descendant that escaped the group
(:func:`enable_subreaper`, :func:`terminate_descendants`), and :func:`is_same_process` /
:func:`terminate_process_group` serve crash reconciliation.
Stdlib only. :mod:`studio_launcher.testing` ships a fake ``li`` for tests.
"""

from __future__ import annotations

from .__about__ import __version__
from ._argv import build_argv, unfilled_placeholders
from ._cwd import resolve_cwd
from ._descendants import enable_subreaper, terminate_descendants
from ._exceptions import (
    CwdUnavailable,
    DeadlineExceeded,
    ExecutableNotFound,
    InvalidAction,
    LaunchError,
    SpawnFailed,
)
from ._executable import LI_EXECUTABLE_ENV, require_li_executable, resolve_li_executable
from ._process import (
    TERMINATE_GRACE_SECONDS,
    find_processes_by_env,
    is_same_process,
    process_group_of,
    process_start_time,
    terminate_process_group,
    terminate_processes,
)
from ._render import render_template
from ._runlog import RUN_LOG_BYTES, RUN_LOG_HEAD_BYTES
from ._spawn import INVOCATION_ENV, STDERR_TAIL_BYTES, spawn_and_wait
from ._validation import (
    ACTION_KINDS,
    MAX_ARGUMENT_BYTES,
    ValidatedAction,
    normalize_action_kind,
    parse_command_allowlist,
    validate_action,
)

__all__ = [
    "ACTION_KINDS",
    "CwdUnavailable",
    "DeadlineExceeded",
    "ExecutableNotFound",
    "INVOCATION_ENV",
    "InvalidAction",
    "LI_EXECUTABLE_ENV",
    "LaunchError",
    "MAX_ARGUMENT_BYTES",
    "RUN_LOG_BYTES",
    "RUN_LOG_HEAD_BYTES",
    "STDERR_TAIL_BYTES",
    "SpawnFailed",
    "TERMINATE_GRACE_SECONDS",
    "ValidatedAction",
    "__version__",
    "build_argv",
    "enable_subreaper",
    "find_processes_by_env",
    "is_same_process",
    "normalize_action_kind",
    "parse_command_allowlist",
    "process_group_of",
    "process_start_time",
    "render_template",
    "require_li_executable",
    "resolve_cwd",
    "resolve_li_executable",
    "spawn_and_wait",
    "terminate_descendants",
    "terminate_process_group",
    "terminate_processes",
    "unfilled_placeholders",
    "validate_action",
]
