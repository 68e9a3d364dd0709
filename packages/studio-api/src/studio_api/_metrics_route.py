"""``GET /metrics``: Prometheus text format (behind the token unless made public)."""

from __future__ import annotations

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ._observe import StudioMetrics

METRICS_PATH = "/metrics"


def install_metrics_route(app: FastAPI, metrics: StudioMetrics) -> None:
    """Add ``GET /metrics`` serving ``metrics``' registry, and ``HEAD /metrics`` (the same
    headers, no body: the server drops a HEAD answer's body)."""

    @app.api_route(METRICS_PATH, methods=["GET", "HEAD"], include_in_schema=False)
    def scrape() -> Response:
        metrics.refresh()
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
