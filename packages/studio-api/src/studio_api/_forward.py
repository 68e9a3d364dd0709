"""What only the leader may do, asked of any node: forwarded to the leader.

Several nodes on one PostgreSQL database serve the same API, and a load balancer may send any
request to any of them. A manual trigger and a backfill belong to the node that leads schedule
evaluation (its admission holds the slots and its tick runs the queued occurrences). A node
that does not lead sends such a request on to the leader: same method, path, query and body,
the caller's ``Authorization`` header, and :data:`~._node_proxy.PROXIED_HEADER` so that the
leader never forwards it again; the leader's status and body are the answer.

The leader is the session that holds the election's advisory lock (``pg_locks``), named
``studio:<node_id>``; its API address is its ``LIONAGI_STUDIO_NODE_URL`` (``studio_nodes``).
No leader, a leader without a URL, a leader that does not answer, or a forwarded request that
reaches a node that no longer leads: 503 naming the node (id and URL), nothing done.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from fastapi import HTTPException, Request
from fastapi.responses import Response

from studio_scheduler_core import SchedulerEngine, read_node

from ._node_proxy import CONNECT_TIMEOUT, PROXIED_HEADER

FORWARD_TIMEOUT = 30.0
"""Seconds the leader has to answer a forwarded request."""

# The response headers a forwarded answer keeps (the rest describe the leader's connection).
_KEPT_HEADERS = ("content-type", "retry-after", "x-request-id")


@dataclass(frozen=True)
class Leader:
    """The node that leads now: its id and its API's base URL (``None``: it gave none)."""

    node_id: str
    url: str | None


async def find_leader(engine: SchedulerEngine) -> Leader | None:
    """The node holding the leader lock of ``engine``'s PostgreSQL database, or ``None``."""
    from studio_state.postgres import leading_node  # psycopg is only needed on PostgreSQL

    node_id = await leading_node(engine.conn)
    if node_id is None:
        return None
    info = await read_node(engine.conn, node_id)
    url = None if info is None or not info.url else info.url.rstrip("/")
    return Leader(node_id, url)


def must_forward(engine: SchedulerEngine) -> bool:
    """Whether a leader-only request must go to another node (PostgreSQL, not leading)."""
    return engine.backend == "postgresql" and not engine.is_leader


def _unavailable(message: str) -> HTTPException:
    return HTTPException(503, detail=message, headers={"Retry-After": "2"})


async def forward_to_leader(engine: SchedulerEngine, request: Request) -> Response:
    """Send ``request`` to the leading node and answer what it answered (see the module).

    503 naming the node when there is no leader, it has no URL, it does not answer, or the
    request was already forwarded once (it reached a node that no longer leads).
    """
    what = f"{request.method} {request.url.path}"
    if request.headers.get(PROXIED_HEADER):
        raise _unavailable(
            f"{what} was forwarded to node {engine.node_id} as the leader, but it no longer "
            "leads schedule evaluation (leadership moved); try again"
        )
    leader = await find_leader(engine)
    if leader is None:
        raise _unavailable(
            f"{what} needs the node that leads schedule evaluation, and no node leads now "
            "(an election takes a few seconds); try again"
        )
    if leader.node_id == engine.node_id:
        raise _unavailable(
            f"{what}: this node ({engine.node_id}) is taking leadership over; try again"
        )
    if leader.url is None:
        raise _unavailable(
            f"{what} needs the leader, node {leader.node_id}, which has no "
            "LIONAGI_STUDIO_NODE_URL, so this node cannot forward to it (ask that node)"
        )
    headers = {PROXIED_HEADER: "1"}
    for name in ("authorization", "content-type", "accept"):
        value = request.headers.get(name)
        if value is not None:
            headers[name] = value
    try:
        async with httpx.AsyncClient(
            timeout=httpx.Timeout(FORWARD_TIMEOUT, connect=CONNECT_TIMEOUT), trust_env=False
        ) as client:
            answer = await client.request(
                request.method,
                leader.url + request.url.path,
                params=list(request.query_params.multi_items()),
                content=await request.body(),
                headers=headers,
            )
    except httpx.HTTPError as exc:
        raise _unavailable(
            f"{what} needs the leader, node {leader.node_id} ({leader.url}), which did not "
            f"answer: {type(exc).__name__}"
        ) from None
    kept = {name: answer.headers[name] for name in _KEPT_HEADERS if name in answer.headers}
    kept["x-studio-forwarded-to"] = leader.node_id
    return Response(content=answer.content, status_code=answer.status_code, headers=kept)
