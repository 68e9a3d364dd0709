"""/metrics on a freshly served Studio: ``HEAD`` answers like ``GET`` without a body, every
dispatch status is exported from the first scrape (0 included), and the process collector's
``process_*`` series (and ``python_info``) are in Studio's registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from studio_outbox import DISPATCH_STATUSES


def _samples(text: str, family: str) -> dict[tuple[tuple[str, str], ...], float]:
    for found in text_string_to_metric_families(text):
        if found.name == family:
            return {tuple(sorted(s.labels.items())): float(s.value) for s in found.samples}
    raise AssertionError(f"no {family} in the scrape")


def test_head_metrics_answers_with_the_headers_and_no_body(studio: Any) -> None:
    got = studio.client.get("/metrics")
    head = studio.client.head("/metrics")
    assert (got.status_code, head.status_code) == (200, 200)
    assert head.headers["content-type"] == got.headers["content-type"]
    assert int(head.headers["content-length"]) > 0  # what a GET would carry
    assert head.content == b""


def test_head_metrics_is_behind_the_token_like_get(serve: Callable[..., Any]) -> None:
    guarded = serve(auth_token="t0ken")
    assert httpx.head(f"{guarded.server.base_url}/metrics").status_code == 401
    assert guarded.client.head("/metrics").status_code == 200


def test_every_dispatch_status_is_exported_from_the_first_scrape(studio: Any) -> None:
    rows = _samples(studio.client.get("/metrics").text, "studio_dispatch_rows")
    assert rows == {(("status", status),): 0.0 for status in DISPATCH_STATUSES}
    assert {"dead_letter", "pending", "delivered"} <= set(DISPATCH_STATUSES)


def test_process_metrics_are_exported(studio: Any) -> None:
    text = studio.client.get("/metrics").text
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert {
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
        "python_info",
    } <= names
    assert _samples(text, "process_resident_memory_bytes")[()] > 0
