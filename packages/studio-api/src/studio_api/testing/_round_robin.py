"""``RoundRobin``: one client over the nodes of a cluster, each request to the next in turn."""

from __future__ import annotations

from typing import Any

import httpx


class RoundRobin:
    """An HTTP client that sends each request to the next of several base URLs in turn (a
    load balancer's simplest policy); ``last`` is the URL the latest request went to."""

    def __init__(self, urls: list[str], *, headers: dict[str, str] | None = None) -> None:
        if not urls:
            raise ValueError("RoundRobin needs at least one URL")
        self.urls = list(urls)
        self.last = ""
        self._turn = 0
        self._client = httpx.Client(headers=headers or {}, timeout=30)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """``method path`` on the next URL."""
        self.last = self.urls[self._turn % len(self.urls)]
        self._turn += 1
        return self._client.request(method, self.last + path, **kwargs)

    def close(self) -> None:
        """Close the underlying client."""
        self._client.close()
