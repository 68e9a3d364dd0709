"""Working-directory resolution for a scheduled child.

Order: the row's persisted ``action_cwd`` when it is still a directory; the registered path of
its ``action_project``; the daemon-wide ``fallback`` (``LIONAGI_SCHEDULER_CWD``) when it is a
directory; else ``None`` (inherit the daemon's cwd) with a once-per-process deprecation warning.

A row whose own ``action_cwd`` is gone and whose project gives no other root is refused with
:class:`CwdUnavailable` rather than being run somewhere else: the daemon-wide fallback is not
that row's root.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from ._exceptions import CwdUnavailable, InvalidAction

logger = logging.getLogger("studio_launcher")

_deprecation_lock = threading.Lock()
_deprecation_warned = False


def _usable(path: str) -> bool:
    return os.path.isabs(path) and os.path.isdir(path)


def _field(schedule: Mapping[str, Any], name: str) -> str | None:
    value = schedule.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidAction(name, f"must be a string, got {type(value).__name__}", value=value)
    return value


def _warn_inherit_once() -> None:
    global _deprecation_warned
    with _deprecation_lock:
        if _deprecation_warned:
            return
        _deprecation_warned = True
    logger.warning(
        "DEPRECATED: a schedule has no execution root (no action_cwd, no registered project "
        "path, no usable LIONAGI_SCHEDULER_CWD); its child inherits the daemon's working "
        "directory. Set action_cwd on such schedules. (Logged once per process.)"
    )


def resolve_cwd(
    schedule: Mapping[str, Any],
    *,
    project_paths: Mapping[str, str] = {},
    fallback: str | None = None,
) -> str | None:
    """Return the directory the child of ``schedule`` runs in, or ``None`` to inherit.

    ``project_paths`` maps registered project names to their paths; ``fallback`` is the
    configured ``LIONAGI_SCHEDULER_CWD``. Raises :class:`CwdUnavailable` naming ``action_cwd``
    when the row's own directory no longer exists (or is not absolute) and its project has no
    usable path.
    """
    own = _field(schedule, "action_cwd")
    if own is not None and _usable(own):
        return own

    project = _field(schedule, "action_project")
    if project is not None:
        registered = project_paths.get(project)
        if registered and _usable(registered):
            if own is not None:
                logger.warning(
                    "action_cwd %r is not a usable directory; using project %r path %r",
                    own,
                    project,
                    registered,
                )
            return registered

    if own is not None:
        if not os.path.isabs(own):
            problem = "is not an absolute path"
        elif os.path.exists(own):
            problem = "is not a directory"
        else:
            problem = "no longer exists"
        if project is not None:
            problem += f", and project {project!r} has no usable registered path"
        raise CwdUnavailable(own, problem)

    if fallback and _usable(fallback):
        return fallback
    if fallback:
        logger.warning("LIONAGI_SCHEDULER_CWD %r is not an absolute directory; ignored", fallback)
    _warn_inherit_once()
    return None
