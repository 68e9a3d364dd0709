"""Resolving the absolute path of the ``li`` executable that scheduled actions run.

Resolution never depends on the child's working directory: a relative result would make the
spawn cwd-dependent (and open to PATH hijack), so every relative candidate is refused.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping

from ._exceptions import ExecutableNotFound

LI_EXECUTABLE_ENV = "LIONAGI_LI_EXECUTABLE"
"""Environment variable naming the ``li`` executable explicitly (absolute path)."""

_LI_NAME = "li"


def _is_executable_file(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and os.access(path, os.X_OK)


def _check_configured(path: str, source: str) -> tuple[list[str] | None, str | None]:
    if not os.path.isabs(path):
        return None, f"{source}={path!r} is not an absolute path (refused: it would depend on cwd)"
    if not _is_executable_file(path):
        return None, f"{source}={path!r} is not an executable regular file"
    return [path], None


def _search_path(path_value: str | None, tries: list[str]) -> str | None:
    if path_value is None:
        tries.append("PATH is not set")
        return None
    relative: list[str] = []
    for entry in path_value.split(os.pathsep):
        if not entry:
            relative.append("(empty entry = cwd)")
            continue
        if not os.path.isabs(entry):
            relative.append(entry)
            continue
        candidate = os.path.join(entry, _LI_NAME)
        if _is_executable_file(candidate):
            return candidate
    reason = "no executable `li` in an absolute PATH directory"
    if relative:
        reason += f" (relative PATH entries skipped: {', '.join(relative)})"
    tries.append(reason)
    return None


def resolve_li_executable(
    *,
    configured: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[list[str] | None, str | None]:
    """Return ``(executable_prefix, None)`` or ``(None, reason listing each try)``.

    Order: ``configured`` if given, else ``$LIONAGI_LI_EXECUTABLE`` if set — it must be
    an absolute path to an executable file, and when it is not, resolution fails instead of
    silently running some other ``li``; else the first ``li`` in an absolute ``PATH`` directory;
    else ``li`` beside ``sys.executable``. ``environ`` defaults to ``os.environ``.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    if configured is not None and configured != "":
        return _check_configured(configured, "configured executable")
    from_env = env.get(LI_EXECUTABLE_ENV)
    if from_env:
        return _check_configured(from_env, LI_EXECUTABLE_ENV)

    tries = [f"{LI_EXECUTABLE_ENV} is not set"]
    found = _search_path(env.get("PATH"), tries)
    if found is not None:
        return [found], None

    interpreter = sys.executable
    if not interpreter or not os.path.isabs(interpreter):
        tries.append(f"sys.executable is not an absolute path ({interpreter!r})")
    else:
        beside = os.path.join(os.path.dirname(interpreter), _LI_NAME)
        if _is_executable_file(beside):
            return [beside], None
        tries.append(f"no executable `li` beside sys.executable ({beside})")
    return None, "; ".join(tries)


def require_li_executable(
    *,
    configured: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """Like :func:`resolve_li_executable` but raise :class:`ExecutableNotFound` on failure."""
    prefix, reason = resolve_li_executable(configured=configured, environ=environ)
    if prefix is None:
        raise ExecutableNotFound(reason or "no candidate")
    return prefix
