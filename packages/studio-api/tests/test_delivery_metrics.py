"""``studio_deliveries_total{outcome,transport}`` per transport, scraped from a real server.

Dispatches go to the argv notify template and to a real HTTP receiver on 127.0.0.1; the
scrape is parsed with ``prometheus_client.parser``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# the argv transport's program: a destination starting with "ok" is delivered, others fail
NOTIFY = (
    sys.executable,
    "-c",
    "import sys; sys.exit(0 if sys.argv[1].startswith('ok') else 1)",
    "{deliver_to}",
)


class _Answer(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(204 if self.path == "/ok" else 500)
        self.send_header("content-length", "0")
        self.end_headers()


@contextlib.contextmanager
def receiver() -> Iterator[str]:
    """A webhook receiver on loopback: ``/ok`` answers 204, any other path 500."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def deliveries(text: str) -> dict[tuple[str, str], float]:
    """``{(outcome, transport): value}`` of ``studio_deliveries_total`` in a scrape."""
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "studio_deliveries_total":
                key = (sample.labels["outcome"], sample.labels["transport"])
                found[key] = float(sample.value)
    return found


def test_deliveries_are_counted_per_transport(
    serve: Callable[..., Any], wait: Callable[..., Any]
) -> None:
    studio = serve(notify_template=NOTIFY)
    before = deliveries(studio.client.get("/metrics").text)
    # every outcome of both transports is a series from the start, at zero
    for outcome in ("delivered", "retried", "dead_letter", "expired"):
        assert before[(outcome, "argv")] == 0
        assert before[(outcome, "webhook")] == 0

    with receiver() as base:
        sends = [
            ("ok:ops", 8),
            ("fail:ops", 1),
            (f"{base}/ok", 8),
            (f"{base}/ok", 8),
            (f"{base}/fail", 1),
        ]
        ids = []
        for deliver_to, attempts in sends:
            body = {"kind": "alert", "deliver_to": deliver_to, "max_attempts": attempts}
            answer = studio.client.post("/api/dispatch", json=body)
            assert answer.status_code == 201, answer.text
            ids.append(answer.json()["id"])

        def settled() -> bool:
            rows = [studio.client.get(f"/api/dispatch/{i}").json()["status"] for i in ids]
            return all(status in ("delivered", "dead_letter") for status in rows)

        wait(settled)

    text = studio.client.get("/metrics").text
    counted = deliveries(text)
    assert counted[("delivered", "argv")] == 1
    assert counted[("dead_letter", "argv")] == 1
    assert counted[("delivered", "webhook")] == 2
    assert counted[("dead_letter", "webhook")] == 1
    assert counted[("retried", "argv")] == counted[("retried", "webhook")] == 0
    assert {transport for _, transport in counted} == {"argv", "webhook"}
    # a second scrape counts nothing twice
    assert deliveries(studio.client.get("/metrics").text) == counted
