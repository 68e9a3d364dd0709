"""``studio schedule trigger``: fire a schedule now through the running Studio server.

A manual fire has to go through the server: only its engine may spawn children and hold the
concurrency slots. ``--wait`` follows the run until it is terminal and exits 0 only when it
ended ``completed``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from .._context import TOKEN_ENV, URL_ENV, auth_token, resolve_server
from .._errors import CliError, one_line
from .._output import console, emit_json, fmt_duration, note, say
from .._types import duration_option
from ._common import is_final_status, json_option
from .run_ops import FAILURE_TAIL_BYTES, print_failure

if TYPE_CHECKING:
    import httpx

REQUEST_TIMEOUT = 10.0
POLL_SECONDS = 0.5
# While waiting, tolerate the server being briefly unreachable (a reload, a busy moment).
UNREACHABLE_GRACE = 10.0


class _Server:
    """A small synchronous client for the few routes ``trigger`` needs."""

    def __init__(self, url_option: str | None) -> None:
        import httpx

        self.url, self.source = resolve_server(url_option)
        headers = {"Accept": "application/json"}
        token = auth_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._httpx = httpx
        self.client = httpx.Client(base_url=self.url, headers=headers, timeout=REQUEST_TIMEOUT)

    def close(self) -> None:
        self.client.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        httpx = self._httpx
        try:
            return self.client.request(method, path, **kwargs)
        except httpx.ConnectError:
            raise CliError(
                f"cannot reach Studio at {self.url} (from {self.source}): nothing is listening;"
                f" start it with 'studio serve', or point {URL_ENV} at the running server"
            ) from None
        except httpx.TimeoutException:
            raise CliError(
                f"Studio at {self.url} did not answer within {REQUEST_TIMEOUT:.0f} s"
                f" ({method} {path}); the request may still have taken effect"
            ) from None
        except httpx.HTTPError as exc:
            raise CliError(f"request to Studio at {self.url} failed: {exc}") from None

    def check_auth(self, response: httpx.Response) -> None:
        if response.status_code in (401, 403):
            hint = (
                f"check {TOKEN_ENV}" if auth_token() else f"set {TOKEN_ENV} to the server's token"
            )
            raise CliError(
                f"Studio at {self.url} refused the request ({response.status_code}"
                f" {_detail(response)}): {hint}"
            )


def _detail(response: httpx.Response) -> str:
    """The error text of an API response ({"detail": …}), bounded to one line."""
    try:
        body = response.json()
    except ValueError:
        return one_line(response.text)[:300] or response.reason_phrase
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                loc = ".".join(str(p) for p in item.get("loc", []) if p != "body")
                parts.append(f"{loc}: {item.get('msg')}" if loc else str(item.get("msg")))
            else:
                parts.append(str(item))
        return one_line("; ".join(parts))
    return one_line(str(detail))


def _resolve_schedule(server: _Server, ref: str) -> dict[str, Any]:
    """The server's schedule for an id or, failing that, a name."""
    response = server.request("GET", f"/api/schedules/{ref}")
    server.check_auth(response)
    if response.status_code == 200:
        found: dict[str, Any] = response.json()
        return found
    if response.status_code not in (404, 422):
        raise CliError(f"Studio answered {response.status_code}: {_detail(response)}")
    offset, page = 0, 200
    while True:
        listing = server.request("GET", "/api/schedules", params={"limit": page, "offset": offset})
        server.check_auth(listing)
        if listing.status_code != 200:
            raise CliError(f"Studio answered {listing.status_code}: {_detail(listing)}")
        body = listing.json()
        rows = body.get("schedules", [])
        for row in rows:
            if row.get("name") == ref:
                named: dict[str, Any] = row
                return named
        offset += len(rows)
        if not rows or offset >= int(body.get("total", 0)):
            raise CliError(f"schedule not found: {ref} (on the server at {server.url})")


def _fire(server: _Server, schedule_id: str) -> str:
    response = server.request(
        "POST",
        f"/api/schedules/{schedule_id}/trigger",
        headers={"Content-Type": "application/json"},
    )
    server.check_auth(response)
    if response.status_code in (200, 201, 202):
        run_id: str = response.json()["run_id"]
        return run_id
    if response.status_code == 409:
        body = (
            response.json()
            if response.headers.get("content-type", "").startswith("application/json")
            else {}
        )
        reason = body.get("reason_code") if isinstance(body, dict) else None
        suffix = f" [{reason}]" if reason else ""
        raise CliError(f"trigger refused{suffix}: {_detail(response)}")
    if response.status_code == 404:
        raise CliError(f"schedule not found: {schedule_id} (on the server at {server.url})")
    raise CliError(f"trigger failed: Studio answered {response.status_code}: {_detail(response)}")


def _get_run(server: _Server, run_id: str) -> dict[str, Any] | None:
    response = server.request("GET", f"/api/schedules/runs/{run_id}")
    server.check_auth(response)
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise CliError(f"Studio answered {response.status_code}: {_detail(response)}")
    run: dict[str, Any] = response.json()
    return run


def _log_tail(server: _Server, run_id: str) -> str:
    """The last bytes of the run's log, from the server ("" when it has none to give)."""
    try:
        response = server.request(
            "GET", f"/api/schedules/runs/{run_id}/log", params={"tail": FAILURE_TAIL_BYTES}
        )
    except CliError:
        return ""
    return response.text if response.status_code == 200 else ""


def _wait(server: _Server, run_id: str, timeout: int | None) -> dict[str, Any]:
    """Poll the run until terminal, with a live status line on stderr."""
    started = time.monotonic()
    err = console(stderr=True)
    live = err.is_terminal
    last_status: str | None = None
    unreachable_since: float | None = None
    status_line = err.status(f"run {run_id}: waiting") if live else None
    if status_line is not None:
        status_line.start()
    try:
        while True:
            try:
                run = _get_run(server, run_id)
                unreachable_since = None
            except CliError:
                now = time.monotonic()
                unreachable_since = unreachable_since or now
                if now - unreachable_since > UNREACHABLE_GRACE:
                    raise
                run = None
            status = str(run.get("status")) if run else "pending"
            elapsed = time.monotonic() - started
            if run is not None and is_final_status(status):
                return run
            if status_line is not None:
                status_line.update(f"run {run_id}: {status} ({elapsed:.0f}s)")
            elif status != last_status:
                note(f"run {run_id}: {status}")
            last_status = status
            if timeout is not None and elapsed > timeout:
                raise CliError(
                    f"run {run_id} is still {status} after {timeout} s (--timeout);"
                    f" it keeps running: see 'studio schedule run {run_id}'"
                )
            time.sleep(POLL_SECONDS)
    finally:
        if status_line is not None:
            status_line.stop()


@click.command("trigger")
@click.argument("schedule")
@click.option("--wait", is_flag=True, help="Follow the run; exit 0 only if it completes.")
@duration_option("--timeout", help="With --wait: give up waiting after this long.")
@click.option(
    "--url", metavar="URL", help=f"Studio server (default ${URL_ENV}, else http://127.0.0.1:8765)."
)
@json_option
def trigger(schedule: str, wait: bool, timeout: int | None, url: str | None, as_json: bool) -> None:
    """Fire SCHEDULE now, through the running Studio server.

    \b
    Examples:
      studio schedule trigger nightly
      studio schedule trigger nightly --wait --timeout 30m
    """
    if timeout is not None and not wait:
        raise click.UsageError("--timeout applies only with --wait")
    server = _Server(url)
    try:
        row = _resolve_schedule(server, schedule)
        run_id = _fire(server, str(row["id"]))
        if not wait:
            if as_json:
                emit_json({"run_id": run_id, "schedule_id": row["id"], "name": row.get("name")})
            else:
                say(f"Triggered schedule {row['id']} ({row.get('name')}): run {run_id}")
            return
        if not as_json:
            say(f"Triggered schedule {row['id']} ({row.get('name')}): run {run_id}")
        run = _wait(server, run_id, timeout)
        tail = "" if run.get("status") == "completed" else _log_tail(server, run_id)
    finally:
        server.close()
    status = str(run.get("status"))
    if as_json:
        emit_json(run)
    else:
        exit_code = run.get("exit_code")
        took = fmt_duration(run.get("fired_at"), run.get("ended_at"))
        say(f"Run {run_id} {status} (exit {'-' if exit_code is None else exit_code}) in {took}")
    if status != "completed":
        print_failure(run.get("status_reason_summary"), tail)
        reason = run.get("status_reason_code") or run.get("status_reason_summary")
        detail = f" [{reason}]" if reason else ""
        raise CliError(f"run {run_id} ended {status}{detail}")
