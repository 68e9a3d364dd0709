"""A real HTTP receiver on 127.0.0.1 for the webhook transport's tests (and the recipe's).

The request path chooses the answer:

- ``/ok`` 204; ``/slow/<s>`` 204 after ``s`` seconds;
- ``/fail`` 500 ``boom``; ``/bad`` 400 ``bad request``; ``/gone`` 410 ``gone``;
- ``/status/<code>/<retry-after>`` that status with that ``Retry-After`` (URL-quoted);
- ``/redirect`` 302 to ``/ok``;
- ``/huge/<code>`` that status with a 10 MB body;
- ``/trickle`` 200 announcing 1 MB, sending one byte every 50 ms until the server stops;
- ``/cut`` 200 announcing 1000 bytes, sending 10, then closing the connection;
- ``/hang`` reads the request and never answers (until the server stops).

Every request is recorded (path, headers with lower-case names, body, the client's port, so
reused connections show) before it is answered. Test modules load this file by path
(pytest's importlib mode has no tests package).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

HUGE_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True)
class Received:
    """One request the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes
    client_port: int


@dataclass
class Receiver:
    """The running receiver: its base URL and what it has received so far."""

    base: str
    stopping: threading.Event
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0
    max_in_flight: int = 0

    def url(self, path: str) -> str:
        return self.base + path

    def received(self) -> list[Received]:
        with self.lock:
            return list(self.requests)

    def wait_for(self, count: int, timeout: float = 5.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.received()
            if len(got) >= count:
                return got
            time.sleep(0.01)
        raise AssertionError(f"expected {count} requests, got {len(self.received())}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse is visible
    receiver: Receiver  # set on the per-server subclass

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _answer(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        receiver = self.receiver
        with receiver.lock:
            receiver.requests.append(
                Received(
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                    client_port=self.client_address[1],
                )
            )
            receiver.in_flight += 1
            receiver.max_in_flight = max(receiver.max_in_flight, receiver.in_flight)
        try:
            with contextlib.suppress(OSError):  # the client may hang up (bounded reads)
                self._route(self.path.split("/")[1:])
        finally:
            with receiver.lock:
                receiver.in_flight -= 1

    def _route(self, parts: list[str]) -> None:
        stopping = self.receiver.stopping
        match parts:
            case ["ok"]:
                self._answer(204)
            case ["slow", seconds]:
                stopping.wait(float(seconds))
                self._answer(204)
            case ["fail"]:
                self._answer(500, b"boom")
            case ["bad"]:
                self._answer(400, b"bad request")
            case ["gone"]:
                self._answer(410, b"gone")
            case ["status", code, retry_after]:
                self._answer(int(code), b"busy", {"Retry-After": unquote(retry_after)})
            case ["redirect"]:
                self._answer(302, b"", {"Location": "/ok"})
            case ["huge", code]:
                self._answer(int(code), b"x" * HUGE_BYTES)
            case ["trickle"]:
                self.send_response(200)
                self.send_header("Content-Length", str(1024 * 1024))
                self.end_headers()
                while not stopping.wait(0.05):
                    self.wfile.write(b".")
                    self.wfile.flush()
            case ["cut"]:
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b"0123456789")
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
            case ["hang"]:
                stopping.wait()
            case _:
                self._answer(404, b"no such path")


@contextlib.contextmanager
def serve_receiver() -> Iterator[Receiver]:
    """Run a receiver on an ephemeral loopback port for the duration of the block."""
    stopping = threading.Event()
    handler = type("Handler", (_Handler,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    receiver = Receiver(f"http://127.0.0.1:{server.server_address[1]}", stopping)
    handler.receiver = receiver
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
