"""A Studio node's name: ``hostname:pid`` by default, checked to fit PostgreSQL's
``application_name`` (where a node's sessions are named ``studio:<node_id>``).

Pure (no driver import): hosts validate ``LIONAGI_STUDIO_NODE_ID`` with it on either backend.
"""

from __future__ import annotations

import os
import socket
from typing import Final

from ._exceptions import InvalidSetting

APPLICATION_PREFIX: Final = "studio:"
"""``application_name`` of a node's PostgreSQL sessions is this prefix plus its node id."""

# PostgreSQL keeps 63 bytes of application_name and replaces non-ASCII with '?'.
NODE_ID_MAX: Final = 63 - len(APPLICATION_PREFIX)
"""The longest node id (what ``application_name`` can hold after the prefix)."""


def default_node_id() -> str:
    """``hostname:pid``, shortened to what ``application_name`` can hold."""
    suffix = f":{os.getpid()}"
    host = socket.gethostname().encode("ascii", "replace").decode()
    return host[: NODE_ID_MAX - len(suffix)] + suffix


def check_node_id(node_id: object) -> str:
    """``node_id`` if it is usable as a node's name, else :class:`InvalidSetting` naming it."""
    if not isinstance(node_id, str) or not node_id:
        raise InvalidSetting(f"node_id must be a non-empty string, got {node_id!r}")
    if len(node_id) > NODE_ID_MAX or not all(32 <= ord(c) < 127 for c in node_id):
        raise InvalidSetting(
            f"node_id must be at most {NODE_ID_MAX} printable ASCII characters, got {node_id!r}"
        )
    return node_id
