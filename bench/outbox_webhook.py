"""Webhook delivery throughput for bench/outbox.py: ours beside a bare httpx loop.

A loopback receiver in its own process answers every POST with 204: by default a minimal
HTTP/1.1 keep-alive server on an asyncio Protocol (fast enough that the senders, not the
receiver, set the pace), or with ``--receiver uvicorn`` an ASGI app under uvicorn (h11
here; it saturates first, so both sides then measure the receiver). Each measurement
enqueues ``rows`` dispatches to it (untimed), then times

  - ours: one ``deliver_due_dispatches`` pass at ``concurrency`` with a long-lived, signed
    ``WebhookTransport`` (claims, sends and outcomes all written to SQLite, synchronous=FULL),
    and
  - bare: ``concurrency`` tasks posting the same stored payloads with the same headers
    through one ``httpx.AsyncClient`` (no database, signatures computed before the clock).

Each side also reports its process's CPU time per delivery, a figure that machine load
disturbs much less than throughput. Run as ``python bench/outbox_webhook.py [--receiver
uvicorn] [--rows N]`` for one round of both, or imported by bench/outbox.py (every round).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
HERE = Path(__file__).resolve().parent


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The receiver: read the whole body, answer 204."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


class _Receiver(asyncio.Protocol):
    """HTTP/1.1 requests with Content-Length bodies, each answered 204, connection kept."""

    _ANSWER = b"HTTP/1.1 204 No Content\r\nServer: bench\r\n\r\n"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in bytes(self.buffer[:end]).split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            total = end + 4 + length
            if len(self.buffer) < total:
                return
            del self.buffer[:total]
            self.transport.write(self._ANSWER)


def _serve_asyncio(port: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Receiver, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def receiver(kind: str = "asyncio") -> Iterator[str]:
    """Run the receiver (``asyncio`` or ``uvicorn``) on a free loopback port in its own
    process; yields the URL to post to."""
    port = _free_port()
    if kind == "asyncio":
        argv = [sys.executable, str(Path(__file__).resolve()), "--serve", str(port)]
    else:
        argv = [
            sys.executable,
            "-m",
            "uvicorn",
            "outbox_webhook:app",
            "--app-dir",
            str(HERE),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
            "--lifespan",
            "off",
        ]
    proc = subprocess.Popen(argv)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the {kind} receiver did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/hook"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def _database(path: Path, url: str, rows: int, synchronous: str = "full") -> Any:
    import studio_outbox
    import studio_state

    conn = await studio_state.open_connection(path, synchronous=synchronous)
    await studio_outbox.ensure_schema(conn)
    await studio_outbox.enqueue_many(
        conn, [{"kind": "bench", "deliver_to": url, "body": {"i": i}} for i in range(rows)]
    )
    return conn


async def ours(
    path: Path, url: str, rows: int, concurrency: int, synchronous: str = "full"
) -> tuple[float, float]:
    """Deliveries/s of one delivery pass over ``rows`` webhook dispatches, and the process's
    CPU milliseconds per delivery (the event loop and SQLite's thread)."""
    import studio_outbox

    conn = await _database(path, url, rows, synchronous)
    try:
        async with studio_outbox.WebhookTransport(SECRET) as webhooks:
            started, cpu = time.perf_counter(), time.process_time()
            counts = await studio_outbox.deliver_due_dispatches(
                conn, limit=rows, concurrency=concurrency, webhook_transport=webhooks
            )
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert counts["delivered"] == rows, counts
        return rows / elapsed, cpu * 1000 / rows
    finally:
        await conn.close()


async def bare(path: Path, url: str, rows: int, concurrency: int) -> tuple[float, float]:
    """Posts/s of a bare httpx loop sending the same stored payloads with the same headers,
    and its CPU milliseconds per post."""
    import httpx

    import studio_outbox

    conn = await _database(path, url, rows)
    try:
        stored = await conn.execute_fetchall("SELECT id, payload FROM dispatch_outbox")
    finally:
        await conn.close()
    signer = studio_outbox.WebhookTransport(SECRET)
    await signer.aclose()
    work = [(r["payload"].encode(), signer.headers(r["id"], r["payload"].encode())) for r in stored]
    queue: asyncio.Queue[tuple[bytes, dict[str, str]]] = asyncio.Queue()
    for item in work:
        queue.put_nowait(item)
    async with httpx.AsyncClient(
        trust_env=False,
        timeout=10,
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=100),
    ) as client:

        async def worker() -> None:
            while not queue.empty():
                body, headers = queue.get_nowait()
                response = await client.post(url, content=body, headers=headers)
                assert 200 <= response.status_code < 300, response.status_code

        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return rows / elapsed, cpu * 1000 / rows


async def round_pair(
    workdir: Path, url: str, rows: int, concurrency: int, bare_first: bool
) -> dict[str, float]:
    """Both sides of one round, in the given order: ``webhook`` and ``bare_httpx``
    (deliveries/s), ``webhook_cpu`` and ``bare_httpx_cpu`` (CPU ms per delivery); then ours
    again on a synchronous=NORMAL database (``webhook_normal``), to show fsync's share."""
    out: dict[str, float] = {}
    order = ("bare_httpx", "webhook") if bare_first else ("webhook", "bare_httpx")
    for which in order:
        run = ours if which == "webhook" else bare
        rate, cpu = await run(workdir / f"{which}.db", url, rows, concurrency)
        out[which], out[which + "_cpu"] = rate, cpu
    out["webhook_normal"], _ = await ours(
        workdir / "webhook-normal.db", url, rows, concurrency, "normal"
    )
    return out


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="one round: ours beside a bare httpx loop")
    parser.add_argument("--receiver", choices=["asyncio", "uvicorn"], default="asyncio")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve_asyncio(args.serve)
    else:
        with receiver(args.receiver) as url, tempfile.TemporaryDirectory() as tmp:
            print(asyncio.run(round_pair(Path(tmp), url, args.rows, 16, bare_first=False)))
