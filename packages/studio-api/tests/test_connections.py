"""The connection guards on their own: the cap follows the descriptor limit, and asyncio's
accept() failure (descriptors exhausted by something other than connections) is logged once,
without a traceback, instead of ten times a second."""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
import textwrap
import time

from studio_api._connections import ACCEPT_BATCH, RESERVED_DESCRIPTORS, connection_cap

# A process that uses up its own descriptors, then serves: every accept() fails with EMFILE.
EXHAUSTED_SERVER = textwrap.dedent(
    """
    import asyncio, logging, os, resource, socket, sys
    from studio_api._connections import install_accept_error_filter

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    if sys.argv[1] == "filtered":
        install_accept_error_filter()
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    async def main():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        hog = []
        while True:
            try:
                hog.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        await asyncio.sleep(3)

    asyncio.run(main())
    """
)


def _accept_log(mode: str) -> str:
    proc = subprocess.Popen(
        [sys.executable, "-c", EXHAUSTED_SERVER, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    clients = []
    try:
        for _ in range(5):
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            time.sleep(0.2)
        _, stderr = proc.communicate(timeout=30)
    finally:
        for client in clients:
            client.close()
        proc.kill()
    return stderr


def test_accept_failures_are_logged_once_without_a_traceback() -> None:
    unfiltered = _accept_log("plain")
    assert unfiltered.count("socket.accept() out of system resource") > 1  # the flood
    filtered = _accept_log("filtered")
    assert filtered.count("socket.accept() out of system resource") == 1, filtered
    assert "Traceback" not in filtered


def test_the_connection_cap_leaves_room_under_the_descriptor_limit() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = connection_cap()
    assert cap >= 16
    if soft != resource.RLIM_INFINITY and soft > RESERVED_DESCRIPTORS + ACCEPT_BATCH + 16:
        assert cap + ACCEPT_BATCH + RESERVED_DESCRIPTORS <= soft
