"""Over-limit bodies from ordinary clients against a real `studio serve`: httpx and the `curl`
binary sending 10 MB and 100 MB (declared and chunked) receive the 413, not "connection reset
by peer" (the server reads and drops the rest of the body after answering, within bounds), and
a client that stops sending is let go of once the discard's idle bound passes. Loopback only."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import count

from studio_api._body_limit import DISCARD_IDLE_SECONDS

pytestmark = pytest.mark.slow

MB = 1000 * 1000
MIB = 1024 * 1024
SIZES = [pytest.param(10 * MB, id="10MB"), pytest.param(100 * MIB, id="100MiB")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from studio_api.testing import ServeProcess

    proc = ServeProcess(tmp_path_factory.mktemp("studio"))
    proc.start()
    yield proc
    proc.close()
    proc.stop()
    assert "Traceback" not in proc.log(), proc.log()


def _assert_413(status: int, text: str) -> None:
    assert status == 413, text
    body = json.loads(text)
    assert body["field"] == "body" and "LIONAGI_STUDIO_MAX_BODY_BYTES" in body["detail"]


def _schedule_body(size: int) -> bytes:
    head = b'{"name": "big", "trigger_type": "interval", "interval_sec": 60, '
    head += b'"action_kind": "agent", "action_prompt": "'
    return head + b"p" * (size - len(head) - 2) + b'"}'


@pytest.mark.parametrize("size", SIZES)
def test_httpx_receives_the_413_for_a_declared_body(server: Any, size: int) -> None:
    with httpx.Client(timeout=60) as client:
        answer = client.post(
            f"{server.url}/api/schedules",
            content=_schedule_body(size),
            headers={"Content-Type": "application/json"},
        )
    _assert_413(answer.status_code, answer.text)
    assert server.health()["status"] == "ok"
    count("oversized_bodies_answered")


@pytest.mark.parametrize("size", SIZES)
def test_httpx_receives_the_413_for_a_chunked_body(server: Any, size: int) -> None:
    body = _schedule_body(size)

    def chunks() -> Iterator[bytes]:
        for at in range(0, len(body), MIB):
            yield body[at : at + MIB]

    with httpx.Client(timeout=60) as client:
        answer = client.post(
            f"{server.url}/api/schedules",
            content=chunks(),
            headers={"Content-Type": "application/json"},
        )
    _assert_413(answer.status_code, answer.text)
    count("oversized_bodies_answered")


def _curl(url: str, body: Path, *headers: str) -> tuple[int, str]:
    curl = shutil.which("curl")
    assert curl is not None, "the curl binary is needed (apt-get install curl)"
    args = [curl, "-sS", "-o", "-", "-w", "\n%{http_code}", "--max-time", "120"]
    for header in ("Content-Type: application/json", *headers):
        args += ["-H", header]
    done = subprocess.run(
        [*args, "--data-binary", f"@{body}", f"{url}/api/schedules"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, f"curl exit {done.returncode}: {done.stderr}"
    text, _, status = done.stdout.rpartition("\n")
    return int(status), text


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(
    "headers",
    [
        pytest.param((), id="expect-100-continue"),  # curl's default for a large body
        pytest.param(("Expect:",), id="whole-body"),  # no invitation: curl sends it all
        pytest.param(("Expect:", "Transfer-Encoding: chunked"), id="chunked"),
    ],
)
def test_curl_receives_the_413(
    server: Any, tmp_path: Path, size: int, headers: tuple[str, ...]
) -> None:
    body = tmp_path / "body.json"
    body.write_bytes(_schedule_body(size))
    status, text = _curl(server.url, body, *headers)
    _assert_413(status, text)
    count("oversized_bodies_answered")


def test_a_client_that_stops_sending_is_let_go(server: Any) -> None:
    """The discard after the 413 is bounded: a client that declares 50 MiB, sends one and
    stalls gets its answer at once and the connection closed after the idle bound."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"POST /api/schedules HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Content-Type: application/json\r\nContent-Length: {50 * MIB}\r\n\r\n".encode()
            + b"x" * MIB
        )
        started = time.monotonic()
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        waited = time.monotonic() - started
    assert data.startswith(b"HTTP/1.1 413 "), data[:200]
    assert b"connection: close" in data.lower()
    # closed by the server once the idle bound passed, not held open (generous slack)
    assert DISCARD_IDLE_SECONDS - 1 <= waited < DISCARD_IDLE_SECONDS + 20, waited
    assert server.health()["status"] == "ok"


def _urllib_post(url: str, body: bytes, chunked: bool) -> tuple[int, str]:
    data: Any = body
    headers = {"Content-Type": "application/json"}
    if chunked:
        data = iter([body[at : at + MIB] for at in range(0, len(body), MIB)])
        headers["Transfer-Encoding"] = "chunked"
    request = urllib.request.Request(f"{url}/api/schedules", data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
@pytest.mark.parametrize("size", SIZES)
def test_the_standard_library_client_receives_the_413(
    server: Any, size: int, chunked: bool
) -> None:
    """urllib (http.client) stops at the first send error, so a reset while it still sends
    is what its user sees; with the rest of the body read, it sends it all and reads the 413."""
    status, text = _urllib_post(server.url, _schedule_body(size), chunked)
    _assert_413(status, text)
    count("oversized_bodies_answered")


@pytest.mark.parametrize("size", SIZES)
def test_the_connection_ends_cleanly_after_the_413(server: Any, size: int) -> None:
    """The whole body goes out without a send error, then the 413 and an orderly close
    (end of stream), not a reset."""
    host, port = server.url.removeprefix("http://").split(":")
    body = _schedule_body(size)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(
            b"POST /api/schedules HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        )
        view = memoryview(body)
        for at in range(0, len(body), MIB):
            sock.sendall(view[at : at + MIB])
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, text = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 "), head
    _assert_413(413, text.decode())
