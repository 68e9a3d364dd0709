"""A run's log from the node that ran it, when several nodes share one PostgreSQL database.

A run's output is written to the run-log directory of the node whose process started its
child, and the run row names that node (``node_id``). A node asked for the log of a run
another node ran fetches it from that node's API (``studio_nodes.url``, from its
``LIONAGI_STUDIO_NODE_URL``), passing the caller's ``Authorization`` header on (the nodes of
one database share one token). The forwarded request carries :data:`PROXIED_HEADER`, so a node
never forwards a request a second time (two nodes misconfigured to point at each other cannot
loop). A node that gave no URL, or does not answer, gets a 409 that names it.

A finished run's log is not asked of its node when the database holds a copy (PostgreSQL:
the node that ran the run stores it when the run ends): any node serves that copy, so the logs
of a dead node's finished runs stay readable. Only a running run's live output, or a finished
run whose node died before storing its log, is fetched from the node.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from fastapi import HTTPException, Request

from studio_scheduler_core import RunState, SchedulerEngine, read_node

PROXIED_HEADER = "x-studio-proxied"
CONNECT_TIMEOUT = 5.0
"""Seconds to reach the other node before answering 409."""


async def node_elsewhere(
    engine: SchedulerEngine, row: RunState, request: Request
) -> tuple[str, str] | None:
    """``(node_id, base URL)`` of the node that ran the run ``row``, when it is not this one.

    ``None`` when this node ran it, when no child has started yet (the log is empty wherever
    it is asked), or when the request was already forwarded by another node. A node without a
    URL raises a 409 naming it.
    """
    node = row.node_id
    if node is None or node == engine.node_id or request.headers.get(PROXIED_HEADER):
        return None
    info = await read_node(engine.conn, node)
    url = None if info is None else info.url
    if not url:
        raise HTTPException(
            409,
            detail=(
                f"run {row.id} ran on node {node}, which keeps its log; that node has no "
                "LIONAGI_STUDIO_NODE_URL, so this node cannot fetch it (ask that node)"
            ),
        )
    return node, url


def _headers(request: Request) -> dict[str, str]:
    headers = {PROXIED_HEADER: "1"}
    auth = request.headers.get("authorization")
    if auth is not None:
        headers["authorization"] = auth
    return headers


def _unreachable(node: str, url: str, what: str) -> HTTPException:
    return HTTPException(
        409, detail=f"the run's log is on node {node} ({url}), which did not answer: {what}"
    )


def _detail(status: int, text: str) -> Any:
    try:
        body = json.loads(text)
    except ValueError:
        return text or f"HTTP {status}"
    return body.get("detail", body) if isinstance(body, dict) else body


async def fetch_log(
    node: str, url: str, path: str, request: Request, params: Mapping[str, Any]
) -> str:
    """The text of ``GET url + path`` on the other node; its error status and detail are
    passed on, and a node that does not answer is a 409 naming it."""
    query = {key: value for key, value in params.items() if value is not None}
    try:
        async with httpx.AsyncClient(
            timeout=httpx.Timeout(30.0, connect=CONNECT_TIMEOUT), trust_env=False
        ) as client:
            response = await client.get(url + path, params=query, headers=_headers(request))
    except httpx.HTTPError as exc:
        raise _unreachable(node, url, type(exc).__name__) from None
    if response.status_code != 200:
        detail = _detail(response.status_code, response.text)
        raise HTTPException(response.status_code, detail=detail)
    return response.text


async def open_stream(node: str, url: str, path: str, request: Request) -> AsyncIterator[bytes]:
    """The other node's event stream for ``path``, as body chunks. Its error status and detail
    are passed on; the connection is closed when the iterator ends or is closed (the caller's
    client went away)."""
    client = httpx.AsyncClient(
        timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT), trust_env=False
    )
    try:
        response = await client.send(
            client.build_request("GET", url + path, headers=_headers(request)), stream=True
        )
    except httpx.HTTPError as exc:
        await client.aclose()
        raise _unreachable(node, url, type(exc).__name__) from None
    if response.status_code != 200:
        try:
            text = (await response.aread()).decode("utf-8", errors="replace")
        finally:
            await response.aclose()
            await client.aclose()
        raise HTTPException(response.status_code, detail=_detail(response.status_code, text))

    async def chunks() -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        except httpx.HTTPError:
            return  # the other node went away mid-stream: the stream just ends
        finally:
            await response.aclose()
            await client.aclose()

    return chunks()
