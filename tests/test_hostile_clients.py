"""Hostile clients against a real `studio serve`: huge request bodies (declared or streamed) are
refused with 413 before they are read, and a flood of half-open connections at `ulimit -n 1024`
neither exhausts the server's descriptors nor floods its log: health, writes and scheduled
children keep working. Loopback only."""

from __future__ import annotations

import contextlib
import errno
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import count

from studio_state.testing import wait_for

pytestmark = pytest.mark.slow

MIB = 1024 * 1024


def _connect(url: str, timeout: float = 10.0) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=timeout)


def _read_response(sock: socket.socket, timeout: float = 10.0) -> tuple[int, dict[str, Any]]:
    """Read one HTTP/1.1 response with a Content-Length body: (status, JSON body)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, json.loads(body) if body else {}


def _post_head(extra: str) -> bytes:
    return (
        "POST /api/schedules HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\n{extra}\r\n"
    ).encode()


def test_a_300_mb_body_is_refused_before_it_is_read(studio_process: Any) -> None:
    server = studio_process()
    server.start()
    rss_before = server.rss_kib()
    # declared: the answer comes before a byte of the body is sent
    with _connect(server.url) as sock:
        sock.sendall(_post_head(f"Content-Length: {300 * MIB}\r\n"))
        status, body = _read_response(sock)
    assert status == 413, body
    assert body["field"] == "body" and str(MIB) in body["detail"]
    # streamed (chunked, no length): refused once past the limit, the rest never read
    sent = 0
    chunk = b"x" * MIB
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    with _connect(server.url) as sock:
        sock.sendall(_post_head("Transfer-Encoding: chunked\r\n"))
        with contextlib.suppress(OSError):  # the server closes the connection on us
            while sent < 300 * MIB:
                sock.sendall(framed)
                sent += MIB
        status, body = _read_response(sock)
    assert status == 413, body
    assert sent < 300 * MIB, "the server kept reading a body past its limit"
    rss_after = server.rss_kib()
    assert rss_after - rss_before < 64 * 1024, (rss_before, rss_after)
    # a body within the limit is read as usual; the server is fine
    ok = server.request(
        "POST",
        "/api/schedules",
        json={
            "name": "fits",
            "trigger_type": "interval",
            "interval_sec": 60,
            "action_kind": "agent",
            "action_prompt": "p" * 1000,
        },
    )
    assert ok.status_code == 201, ok.text
    assert server.health()["status"] == "ok"
    assert "Traceback" not in server.log()
    count("hostile_bodies_refused", 2)


def test_the_body_limit_is_a_setting(studio_process: Any) -> None:
    server = studio_process(env={"LIONAGI_STUDIO_MAX_BODY_BYTES": "2000"})
    server.start()
    big = server.request(
        "POST",
        "/api/schedules",
        json={
            "name": "big",
            "trigger_type": "interval",
            "interval_sec": 60,
            "action_kind": "agent",
            "action_prompt": "p" * 3000,
        },
    )
    assert big.status_code == 413 and big.json()["field"] == "body"
    assert "2000 bytes" in big.json()["detail"]
    small = server.request(
        "POST",
        "/api/schedules",
        json={
            "name": "small",
            "trigger_type": "interval",
            "interval_sec": 60,
            "action_kind": "agent",
            "action_prompt": "p",
        },
    )
    assert small.status_code == 201, small.text


def _open_half_open(url: str, n: int) -> list[socket.socket]:
    """``n`` connections that never send a byte (non-blocking connect, no request)."""
    host, port = url.removeprefix("http://").split(":")
    sockets: list[socket.socket] = []
    for _ in range(n):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex((host, int(port)))
        assert code in (0, errno.EINPROGRESS), code
        sockets.append(sock)
    return sockets


def test_half_open_connections_cannot_exhaust_descriptors(
    studio_process: Any, tmp_path: Path
) -> None:
    server = studio_process(nofile=(1024, 1024))
    marker = tmp_path / "fired"
    child = tmp_path / "child.py"
    child.write_text(f"open({str(marker)!r}, 'a').write('x')\n")
    server.start()
    baseline = server.open_descriptors()
    attackers = _open_half_open(server.url, 1100)
    try:
        time.sleep(1.0)  # let the server accept what it will
        assert server.open_descriptors() < 1000, "the connection cap did not hold"
        started = time.monotonic()
        health = wait_for(server.health, timeout=15, what="health answers during the flood")
        assert health["status"] == "ok"
        assert time.monotonic() - started < 15
        created = server.request(
            "POST",
            "/api/schedules",
            json={
                "name": "during-flood",
                "trigger_type": "interval",
                "interval_sec": 1,
                "action_kind": "command",
                "action_command": "python3",
                "action_command_args": [str(child)],
                "action_cwd": str(tmp_path),
            },
        )
        assert created.status_code == 201, created.text
        # a scheduled child still gets its descriptors (pipes, /dev/null ...)
        wait_for(marker.exists, timeout=30, what="a scheduled child ran during the flood")
        # connections that never send their request are closed by the header timeout
        wait_for(
            lambda: server.open_descriptors() < baseline + 100,
            timeout=30,
            what="half-open connections closed by the header timeout",
        )
    finally:
        for sock in attackers:
            sock.close()
    log = server.log()
    assert "Traceback" not in log
    assert "Too many open files" not in log
    assert "accept" not in log.lower()
    assert len(log.splitlines()) < 200, f"log flooded: {len(log.splitlines())} lines"
    failed = server.rows("SELECT id FROM schedule_runs WHERE status = 'failed'")
    assert failed == []
    count("half_open_connections_survived", len(attackers))


def test_studio_serve_raises_its_soft_nofile_limit(studio_process: Any) -> None:
    server = studio_process(nofile=(256, 2048))
    server.start()
    limits = Path(f"/proc/{server.pid}/limits").read_text()
    line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
    assert line.split()[3:5] == ["2048", "2048"], line
