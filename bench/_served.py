"""A studio-api app served by uvicorn in its own process, and the rounds measured against it
(shared by the benchmark scripts that time HTTP requests).

A script serves itself: :func:`serving` starts ``python SCRIPT --serve --db DB --port PORT``
(with the environment's ``LIONAGI_*`` variables removed), and the script's ``--serve`` branch
calls :func:`serve` with its settings. :func:`measure_rounds` runs the warm-up and then the
rounds, collecting each figure a round returns; :func:`median_range` prints one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    """The hidden options of a script's ``--serve`` branch."""
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)


def serve(db: str, port: int, **settings: Any) -> None:
    """Serve the app on ``HOST:port`` over ``db`` (a SQLite file, or a PostgreSQL URL) until
    terminated (``settings``: more :class:`StudioSettings` values)."""
    import uvicorn

    from studio_api import StudioSettings, create_app

    values = {"db": db, "host": HOST, "port": port, **settings}
    config = uvicorn.Config(
        create_app(StudioSettings.from_env({}, **values)),
        host=HOST,
        port=port,
        log_level="warning",
        access_log=False,
    )
    uvicorn.Server(config).run()


def free_port() -> int:
    """A TCP port free on ``HOST`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serving(
    script: str, db: Path | str, *, env: Mapping[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start ``script --serve`` over ``db``; its base URL and process, terminated on exit."""
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LIONAGI_")}
    argv = [sys.executable, os.path.abspath(script), "--serve", "--db", str(db)]
    proc = subprocess.Popen(
        [*argv, "--port", str(port)],
        env={**clean, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield f"http://{HOST}:{port}", proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def wait_ready(client: Any, base: str, proc: subprocess.Popen[bytes]) -> None:
    """Wait (at most 60 s) until the server answers ``/api/health``."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            told = proc.stderr.read().decode()[-400:] if proc.stderr is not None else ""
            raise RuntimeError(f"the server exited: {told}")
        with contextlib.suppress(Exception):
            if (await client.get(f"{base}/api/health", timeout=2)).status_code == 200:
                return
        await asyncio.sleep(0.1)
    raise RuntimeError("the server did not answer within 60 s")


async def measure_rounds(
    rounds: int,
    one_round: Callable[[int], Awaitable[Mapping[str, float]]],
    *,
    warm_up: Callable[[], Awaitable[object]] | None = None,
) -> dict[str, list[float]]:
    """Run ``warm_up`` once, then ``one_round(r)`` for each round; each figure's values."""
    if warm_up is not None:
        await warm_up()
    out: dict[str, list[float]] = {}
    for r in range(rounds):
        for name, value in (await one_round(r)).items():
            out.setdefault(name, []).append(value)
    return out


def median_range(values: list[float], unit: str = "") -> str:
    """``median (min …, max …)`` with three decimals."""
    return f"{statistics.median(values):.3f}{unit} (min {min(values):.3f}, max {max(values):.3f})"
