"""The GitHub REST client of github_poll: one shared ``httpx.AsyncClient`` per engine.

A request answers with a :class:`Page`: ``ok`` (200, the JSON list of pull requests, the
``ETag`` and the ``Link: rel="next"`` URL), ``not_modified`` (304 to ``If-None-Match``),
``auth`` (401), ``rate_limited`` (429, or 403 with ``Retry-After`` or
``X-RateLimit-Remaining: 0``; ``retry_at`` from ``Retry-After`` else ``X-RateLimit-Reset``) or
``error`` (anything else, transport errors included). Nothing here raises for what GitHub
answers, and the token is never logged. A request has ``timeout`` seconds in total (a server
trickling its answer cannot stretch it), a body is read up to :data:`MAX_RESPONSE_BYTES` and
a page may hold at most :data:`MAX_PAGE_ITEMS` entries; beyond any of these the page is an
``error``. ``Link`` URLs are followed only on the configured
API's own origin, so the token is never sent anywhere else.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

if TYPE_CHECKING:  # httpx is imported on first use: CLI commands never pay for it
    import httpx

from ..__about__ import __version__

logger = logging.getLogger("studio_scheduler_core")

TIMEOUT_SECONDS = 15.0
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""A pulls page of 100 PRs is about 1-2 MB; a larger answer is not a pulls page."""
MAX_PAGE_ITEMS = 1000
"""Ten times the ``per_page`` asked for; a longer page is not GitHub's."""
DEFAULT_RETRY_SECONDS = 60.0
PageStatus = Literal["ok", "not_modified", "auth", "rate_limited", "error"]


@dataclass(frozen=True, slots=True)
class Page:
    """One answer of the pulls endpoint."""

    status: PageStatus
    pulls: list[dict[str, Any]] = field(default_factory=list)
    etag: str | None = None
    next_url: str | None = None
    retry_at: float | None = None
    http_status: int | None = None
    detail: str = ""


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


def retry_at(headers: Mapping[str, str], *, now: float) -> float | None:
    """When GitHub allows the next request: ``Retry-After`` (seconds or an HTTP date), else
    ``X-RateLimit-Reset`` (epoch seconds); ``None`` when neither header is usable."""
    after = headers.get("retry-after")
    if after is not None:
        text = after.strip()
        if text.isdigit():
            return now + float(text)
        try:
            parsed = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            parsed = None
        if parsed is not None:
            return parsed.timestamp()
    reset = headers.get("x-ratelimit-reset")
    if reset is not None:
        try:
            value = float(reset.strip())
        except ValueError:
            return None
        if math.isfinite(value):
            return value
    return None


class GithubClient:
    """Pulls listing requests against ``api_url`` with an optional bearer token."""

    def __init__(
        self,
        *,
        api_url: str,
        token: str | None,
        timeout: float = TIMEOUT_SECONDS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            headers = {
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": f"studio-scheduler-core/{__version__}",
            }
            if self._token:
                headers["Authorization"] = f"Bearer {self._token}"
            self._client = httpx.AsyncClient(
                headers=headers,
                timeout=httpx.Timeout(self._timeout),
                transport=self._transport,
                follow_redirects=False,
            )
        return self._client

    async def aclose(self) -> None:
        """Close the shared client (a later request opens a new one)."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def pulls_url(self, repo: str) -> str:
        """``{api}/repos/{owner}/{name}/pulls``."""
        return f"{self.api_url}/repos/{repo}/pulls"

    def same_origin(self, url: str) -> bool:
        """Whether ``url`` is on the configured API's scheme, host and port."""
        return _origin(url) == _origin(self.api_url)

    async def get_pulls(
        self,
        url: str,
        *,
        now: float,
        params: Mapping[str, str] | None = None,
        etag: str | None = None,
    ) -> Page:
        """GET one page of the pulls listing (``params`` for the first page, none for a
        ``Link`` URL, which carries its own query)."""
        import httpx

        headers = {"If-None-Match": etag} if etag else {}
        # No params for a Link URL: httpx would replace the query the URL carries.
        query = dict(params) if params else None
        try:
            async with asyncio.timeout(self._timeout):
                return await self._request(url, query, headers, etag=etag, now=now)
        except TimeoutError:
            return Page("error", detail=f"no complete answer within {self._timeout:g}s")
        except httpx.HTTPError as exc:
            return Page("error", detail=f"{type(exc).__name__}: {exc}")

    async def _request(
        self,
        url: str,
        query: dict[str, str] | None,
        headers: dict[str, str],
        *,
        etag: str | None,
        now: float,
    ) -> Page:
        async with self._http().stream("GET", url, params=query, headers=headers) as response:
            code = response.status_code
            if code != 200:
                return self._not_ok(response, etag=etag, now=now)
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > MAX_RESPONSE_BYTES:
                    return Page(
                        "error",
                        http_status=code,
                        detail=f"the response is larger than {MAX_RESPONSE_BYTES} bytes",
                    )
        try:
            body = json.loads(bytes(data))
        except (ValueError, RecursionError):
            return Page("error", http_status=code, detail="the response is not JSON")
        return self._page(response, body)

    def _not_ok(self, response: httpx.Response, *, etag: str | None, now: float) -> Page:
        code = response.status_code
        if code == 304:
            return Page("not_modified", etag=etag, http_status=code)
        if code == 401:
            return Page("auth", http_status=code, detail="401 Unauthorized")
        limited = code == 429 or (
            code == 403
            and (
                "retry-after" in response.headers
                or response.headers.get("x-ratelimit-remaining", "").strip() == "0"
            )
        )
        if limited:
            when = retry_at(response.headers, now=now)
            return Page(
                "rate_limited",
                retry_at=now + DEFAULT_RETRY_SECONDS if when is None else when,
                http_status=code,
                detail=f"HTTP {code} rate limit",
            )
        return Page("error", http_status=code, detail=f"HTTP {code}")

    def _page(self, response: httpx.Response, body: Any) -> Page:
        code = response.status_code
        if not isinstance(body, list):
            return Page("error", http_status=code, detail="the response is not a JSON list")
        if len(body) > MAX_PAGE_ITEMS:
            return Page(
                "error",
                http_status=code,
                detail=f"{len(body)} entries on one page (more than {MAX_PAGE_ITEMS})",
            )
        next_url = response.links.get("next", {}).get("url")
        if next_url is not None and not self.same_origin(next_url):
            logger.warning(
                "GitHub Link rel=next points off the API origin (%s); not followed",
                urlsplit(next_url).hostname,
            )
            next_url = None
        return Page(
            "ok",
            pulls=[pr for pr in body if isinstance(pr, dict)],
            etag=response.headers.get("etag"),
            next_url=next_url,
            http_status=code,
        )
