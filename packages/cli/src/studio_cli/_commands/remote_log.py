"""A run's log kept by another node (several nodes on one PostgreSQL database).

A run's output is written on the machine of the node that ran it, and the run names that node.
When the log is not in this machine's run-log directory and another node ran the run,
``studio schedule logs`` asks that node's API (its ``LIONAGI_STUDIO_NODE_URL``, recorded in the
database) with this shell's ``LIONAGI_STUDIO_AUTH_TOKEN``, the way any node's API does.

A finished run's log that is not in this machine's run-log directory is read from the copy the
node that ran it stored in the database when the run ended (:func:`stored_log`), so it stays
readable once that node is gone; only a run with no stored copy is asked of its node.

A SQLite database is one machine's file, run by one node at a time: every run on it ran here,
and a missing log file is a run that has printed nothing yet (an empty log, as the API answers).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._context import auth_token, configured_node_id, open_db, run_async
from .._errors import CliError
from .._output import note

if TYPE_CHECKING:
    from studio_scheduler_core import NodeInfo

CONNECT_TIMEOUT = 5.0


_TERMINAL = frozenset({"completed", "failed", "timed_out", "cancelled", "skipped"})


def stored_log(
    db_path: Path | str, run: dict[str, Any], path: str, tail: int | None
) -> bytes | None:
    """The finished ``run``'s log as stored in the database, when its file is not here at
    ``path`` (``None``: SQLite, the run not finished, the file here, or no stored copy)."""
    from studio_state import is_postgres

    if run.get("status") not in _TERMINAL or os.path.exists(path):
        return None
    if not is_postgres(str(db_path)):
        return None

    async def _read() -> bytes | None:
        from studio_scheduler_core import read_stored_run_log

        async with open_db(db_path) as conn:
            return await read_stored_run_log(conn, str(run["id"]), tail=tail)

    return run_async(_read)


def node_url(db_path: Path | str, run: dict[str, Any], path: str) -> str | None:
    """The API base URL of the node that ran ``run``, when its log is not here at ``path``.

    ``None`` when the log is on this machine: the file is there, the run has not started a
    child yet, the database is SQLite (one machine's file), or the run's node is this
    machine's: the one ``LIONAGI_STUDIO_NODE_ID`` names here, or a default-named node of this
    host (:func:`_this_machine`) that gave no URL. Another node that gave no URL is a
    :class:`CliError` naming it.
    """
    from studio_state import is_postgres

    node = run.get("node_id")
    if node is None or os.path.exists(path) or not is_postgres(str(db_path)):
        return None

    async def _read() -> NodeInfo | None:
        from studio_scheduler_core import read_node

        async with open_db(db_path) as conn:
            return await read_node(conn, str(node))

    info = run_async(_read)
    url = None if info is None else info.url
    if node == configured_node_id() or (not url and _this_machine(str(node))):
        return None  # this node's log: a missing file is a run that printed nothing yet
    if not url:
        raise CliError(
            f"run {run['id']} ran on node {node}, which keeps its log and has no "
            "LIONAGI_STUDIO_NODE_URL: run this command on that node's machine"
        )
    return str(url)


def _this_machine(node: str) -> bool:
    """Whether ``node`` is a default node id (``hostname:pid``) of this machine."""
    from studio_state import default_node_id

    host, _, pid = node.rpartition(":")
    return bool(host) and pid.isdigit() and host == default_node_id().rpartition(":")[0]


def _headers() -> dict[str, str]:
    token = auth_token()
    return {"authorization": f"Bearer {token}"} if token else {}


def _failed(run: dict[str, Any], url: str, what: str) -> CliError:
    return CliError(f"run {run['id']} ran on node {run['node_id']} ({url}): {what}")


def _detail(text: str) -> str:
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:200]
    return str(body.get("detail", body)) if isinstance(body, dict) else str(body)


def print_remote(run: dict[str, Any], url: str, *, tail: int | None, follow: bool) -> None:
    """Print the run's log from ``url``; with ``follow``, its event stream until the run ends."""
    import httpx

    route = f"{url}/api/schedules/runs/{run['id']}/log"
    timeout = httpx.Timeout(None if follow else 30.0, connect=CONNECT_TIMEOUT)
    try:
        with httpx.Client(timeout=timeout, trust_env=False, headers=_headers()) as client:
            if not follow:
                answer = client.get(route, params={} if tail is None else {"tail": tail})
                if answer.status_code != 200:
                    raise _failed(run, url, f"HTTP {answer.status_code}: {_detail(answer.text)}")
                sys.stdout.write(answer.text)
                sys.stdout.flush()
                return
            with client.stream("GET", route + "/stream") as stream:
                if stream.status_code != 200:
                    text = stream.read().decode("utf-8", errors="replace")
                    raise _failed(run, url, f"HTTP {stream.status_code}: {_detail(text)}")
                _print_events(run, stream.iter_lines())
    except httpx.HTTPError as exc:
        raise _failed(run, url, f"did not answer ({type(exc).__name__})") from None


def _print_events(run: dict[str, Any], lines: Any) -> None:
    event = "message"
    for line in lines:
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
            if event == "end":
                end = json.loads(data)
                note(f"run {run['id']} {end.get('status')} ({end.get('reason_code') or '-'})")
                return
            sys.stdout.write(data + "\n")
            sys.stdout.flush()
        elif line == "":
            event = "message"
