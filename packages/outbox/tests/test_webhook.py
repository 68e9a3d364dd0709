"""The webhook transport against a real HTTP receiver on 127.0.0.1 (tests/webhook_receiver.py).

Signatures are checked with the independent ``standardwebhooks`` package.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Iterator
from typing import Any

import aiosqlite
import pytest
import standardwebhooks

import studio_outbox
import studio_state
from studio_outbox import DispatchReason, WebhookTransport
from studio_state.testing import load_beside

_RECEIVER_MODULE = "studio_outbox_test_webhook_receiver"


webhook_receiver = load_beside(__file__, "webhook_receiver.py", _RECEIVER_MODULE)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture
def receiver() -> Iterator[Any]:
    with webhook_receiver.serve_receiver() as running:
        yield running


async def _enqueue(conn: aiosqlite.Connection, to: str, clock: Any, **kwargs: Any) -> str:
    return await studio_outbox.enqueue_dispatch(
        conn, kind="run.failed", deliver_to=to, body={"run_id": "r1"}, clock=clock, **kwargs
    )


async def _deliver(conn: aiosqlite.Connection, clock: Any, **kwargs: Any) -> dict[str, int]:
    return await studio_outbox.deliver_due_dispatches(conn, clock=clock, **kwargs)


async def test_signed_post_verifies_with_standardwebhooks_and_verify_webhook(
    conn: aiosqlite.Connection, receiver: Any, probe: Any
) -> None:
    clock = time.time  # standardwebhooks checks the timestamp against the real time
    dispatch_id = await _enqueue(conn, receiver.url("/ok"), clock)
    counts = await _deliver(conn, clock, webhook_secret=SECRET)
    assert counts["delivered"] == 1
    (request,) = receiver.received()
    assert request.path == "/ok"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["webhook-id"] == dispatch_id
    assert abs(int(request.headers["webhook-timestamp"]) - time.time()) < 30
    assert request.headers["webhook-signature"].startswith("v1,")
    row = await probe.row(dispatch_id)
    assert request.body.decode() == row["payload"]  # the stored DispatchSignal, byte for byte
    theirs = standardwebhooks.Webhook(SECRET).verify(request.body, request.headers)
    ours = studio_outbox.verify_webhook(SECRET, request.headers, request.body)
    assert theirs == ours
    assert ours["dispatch_id"] == dispatch_id and ours["attempt"] == 1
    assert ours["body"] == {"run_id": "r1"}
    assert row["status"] == "delivered"


async def test_unsigned_sends_id_and_timestamp_and_the_id_is_stable_across_retries(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, receiver: Any, probe: Any
) -> None:
    dispatch_id = await _enqueue(conn, receiver.url("/fail"), clock)
    await _deliver(conn, clock)
    clock.advance(60)
    await _deliver(conn, clock)
    first, second = receiver.received()
    for request in (first, second):
        assert request.headers["webhook-id"] == dispatch_id
        assert "webhook-signature" not in request.headers
    assert int(first.headers["webhook-timestamp"]) == int(clock()) - 60
    assert int(second.headers["webhook-timestamp"]) == int(clock())
    assert [json.loads(r.body)["attempt"] for r in (first, second)] == [1, 2]
    assert (await probe.row(dispatch_id))["attempt"] == 2


async def test_5xx_retries_with_backoff_and_the_body_head_as_last_error(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, receiver: Any, probe: Any
) -> None:
    dispatch_id = await _enqueue(conn, receiver.url("/fail"), clock)
    counts = await _deliver(conn, clock)
    assert counts == {"attempted": 1, "delivered": 0, "retried": 1, "dead_letter": 0, "expired": 0}
    row = await probe.row(dispatch_id)
    assert row["status"] == "pending"
    assert row["last_error"] == "HTTP 500: boom"
    assert row["next_attempt_at"] == clock() + studio_outbox.backoff_seconds(1)
    assert (await probe.reasons(dispatch_id))[-1] == DispatchReason.RETRY_BACKOFF


async def test_410_dead_letters_at_once_and_is_never_sent_again(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, receiver: Any, probe: Any
) -> None:
    dispatch_id = await _enqueue(conn, receiver.url("/gone"), clock, ack_required=True)
    counts = await _deliver(conn, clock)
    assert counts["dead_letter"] == 1 and counts["retried"] == 0
    row = await probe.row(dispatch_id)
    assert row["status"] == "dead_letter"
    assert row["last_error"] == "HTTP 410: gone"
    assert (await probe.reasons(dispatch_id))[-1] == "dispatch.dead_letter.gone"
    clock.advance(3600)
    assert (await _deliver(conn, clock))["attempted"] == 0
    assert len(receiver.received()) == 1


@pytest.mark.parametrize(
    ("status", "retry_after", "expected_delay"),
    [
        (429, "7", 7.0),
        (503, "0", 1.0),  # at least 1 s
        (429, "86400", 1800.0),  # at most 1800 s
        (500, "soon", 60.0),  # unreadable: the normal backoff
    ],
)
async def test_retry_after_seconds_replaces_the_backoff(
    conn: aiosqlite.Connection,
    clock: studio_state.ManualClock,
    receiver: Any,
    probe: Any,
    status: int,
    retry_after: str,
    expected_delay: float,
) -> None:
    dispatch_id = await _enqueue(conn, receiver.url(f"/status/{status}/{retry_after}"), clock)
    await _deliver(conn, clock)
    row = await probe.row(dispatch_id)
    assert row["status"] == "pending"
    assert row["next_attempt_at"] == clock() + expected_delay
    assert row["last_error"] == f"HTTP {status}: busy"


async def test_retry_after_http_date_replaces_the_backoff(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, receiver: Any, probe: Any
) -> None:
    when = email.utils.formatdate(clock() + 120, usegmt=True).replace(" ", "%20")
    dispatch_id = await _enqueue(conn, receiver.url(f"/status/429/{when}"), clock)
    await _deliver(conn, clock)
    assert (await probe.row(dispatch_id))["next_attempt_at"] == clock() + 120


async def test_redirects_are_not_followed_and_other_4xx_retry(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, receiver: Any, probe: Any
) -> None:
    redirected = await _enqueue(conn, receiver.url("/redirect"), clock)
    refused = await _enqueue(conn, receiver.url("/bad"), clock)
    counts = await _deliver(conn, clock)
    assert counts["retried"] == 2
    assert sorted(r.path for r in receiver.received()) == ["/bad", "/redirect"]  # not /ok
    assert (await probe.row(redirected))["last_error"] == "HTTP 302:"
    assert (await probe.row(refused))["last_error"] == "HTTP 400: bad request"
    for dispatch_id in (redirected, refused):
        assert (await probe.row(dispatch_id))["status"] == "pending"


async def test_a_10_mb_response_is_read_only_64_kib_deep(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, receiver: Any, probe: Any
) -> None:
    accepted = await _enqueue(conn, receiver.url("/huge/200"), clock)
    failed = await _enqueue(conn, receiver.url("/huge/500"), clock)
    started = time.monotonic()
    counts = await _deliver(conn, clock)
    assert time.monotonic() - started < 8  # bounded: nowhere near reading 20 MB slowly
    assert counts["delivered"] == 1 and counts["retried"] == 1
    assert (await probe.row(accepted))["status"] == "delivered"
    error = (await probe.row(failed))["last_error"]
    assert error == "HTTP 500: " + "x" * 500


@pytest.mark.parametrize("path", ["/trickle", "/hang"])
async def test_a_response_that_never_completes_hits_the_total_deadline(
    conn: aiosqlite.Connection,
    clock: studio_state.ManualClock,
    receiver: Any,
    probe: Any,
    path: str,
) -> None:
    dispatch_id = await _enqueue(conn, receiver.url(path), clock)
    async with WebhookTransport(timeout=1.0, clock=clock) as webhooks:
        started = time.monotonic()
        counts = await _deliver(conn, clock, webhook_transport=webhooks)
        elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 5  # a total deadline: trickled bytes do not extend it
    assert counts["retried"] == 1
    row = await probe.row(dispatch_id)
    assert row["status"] == "pending"
    assert row["last_error"] == ("no complete response within 1s (connect, request and response)")


async def test_a_connection_cut_mid_response_or_refused_is_retried(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, receiver: Any, probe: Any
) -> None:
    cut = await _enqueue(conn, receiver.url("/cut"), clock)
    refused = await _enqueue(conn, "http://127.0.0.1:9/nobody-listens", clock)
    counts = await _deliver(conn, clock)
    assert counts["retried"] == 2
    for dispatch_id in (cut, refused):
        row = await probe.row(dispatch_id)
        assert row["status"] == "pending"
        assert row["last_error"].startswith("connection error: ")
        assert len(row["last_error"]) <= 2000


async def test_one_client_keeps_its_connection_alive_across_passes(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, receiver: Any, probe: Any
) -> None:
    async with WebhookTransport(SECRET, clock=clock) as webhooks:
        for _ in range(3):
            await _enqueue(conn, receiver.url("/ok"), clock)
            counts = await _deliver(conn, clock, webhook_transport=webhooks, concurrency=1)
            assert counts["delivered"] == 1
        assert not webhooks.closed
    assert webhooks.closed
    assert len({r.client_port for r in receiver.wait_for(3)}) == 1


async def test_webhooks_are_sent_at_the_outbox_concurrency(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, receiver: Any
) -> None:
    for _ in range(8):
        await _enqueue(conn, receiver.url("/slow/0.3"), clock)
    counts = await _deliver(conn, clock, concurrency=4)
    assert counts["delivered"] == 8
    assert receiver.max_in_flight == 4


async def test_url_rows_use_webhooks_and_the_rest_wait_for_a_template(
    conn: aiosqlite.Connection,
    clock: studio_state.ManualClock,
    receiver: Any,
    probe: Any,
    recorder: Any,
) -> None:
    hook = await _enqueue(conn, receiver.url("/ok"), clock)
    argv = await _enqueue(conn, "ops-channel", clock)
    counts = await _deliver(conn, clock)  # no template: only the webhook goes out
    assert counts["delivered"] == 1
    assert (await probe.row(hook))["status"] == "delivered"
    paused = await probe.row(argv)
    assert (paused["status"], paused["attempt"]) == ("pending", 0)
    counts = await _deliver(conn, clock, notify_template=recorder.template())
    assert counts["delivered"] == 1
    assert [p["dispatch_id"] for p in recorder.payloads()] == [argv]
    assert len(receiver.received()) == 1


@pytest.mark.parametrize(
    "deliver_to",
    ["http:/x", "https://", "HTTPS:example.com", "http://exa mple.com/", "https://h:99999/"],
)
async def test_a_webhook_prefix_that_is_not_a_url_is_refused_at_enqueue(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, probe: Any, deliver_to: str
) -> None:
    with pytest.raises(studio_outbox.InvalidDispatch) as caught:
        await _enqueue(conn, deliver_to, clock)
    assert caught.value.field == "deliver_to"
    assert str(caught.value).startswith("deliver_to: ")
    assert await probe.count() == 0
    assert await probe.count("status_transitions") == 0


async def test_a_malformed_webhook_secret_is_refused_before_any_write(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, receiver: Any, probe: Any
) -> None:
    dispatch_id = await _enqueue(conn, receiver.url("/ok"), clock)
    before = await probe.snapshot()
    with pytest.raises(studio_outbox.InvalidWebhookSecret) as caught:
        await _deliver(conn, clock, webhook_secret="whsec_not base64!")
    assert caught.value.field == "webhook_secret"
    assert "not base64" not in str(caught.value)  # the value is never echoed
    assert await probe.snapshot() == before
    assert receiver.received() == []
    assert (await probe.row(dispatch_id))["attempt"] == 0


async def test_a_consumer_verifies_the_webhook_and_acks_it(
    conn: aiosqlite.Connection, receiver: Any, probe: Any
) -> None:
    clock = time.time
    dispatch_id = await _enqueue(conn, receiver.url("/ok"), clock, ack_required=True)
    async with WebhookTransport(SECRET) as webhooks:
        assert isinstance(webhooks, studio_outbox.Transport)
        counts = await _deliver(conn, clock, webhook_transport=webhooks)
    assert counts["delivered"] == 1
    (request,) = receiver.received()
    payload = studio_outbox.verify_webhook(SECRET, request.headers, request.body)
    assert payload["dispatch_id"] == dispatch_id
    assert await studio_outbox.ack_dispatch(conn, payload["dispatch_id"], payload["ack_token"])
    assert (await probe.row(dispatch_id))["status"] == "acked"


async def test_hostile_receivers_together_lose_nothing_and_log_no_traceback(
    conn: aiosqlite.Connection,
    clock: studio_state.ManualClock,
    receiver: Any,
    probe: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    paths = ["/ok", "/fail", "/gone", "/status/429/5", "/redirect", "/huge/500"]
    paths += ["/trickle", "/hang", "/cut", "/bad"]
    ids = {path: await _enqueue(conn, receiver.url(path), clock) for path in paths}
    async with WebhookTransport(timeout=1.0, clock=clock) as webhooks:
        counts = await _deliver(conn, clock, webhook_transport=webhooks, concurrency=16)
    assert counts == {
        "attempted": 10,
        "delivered": 1,
        "retried": 8,
        "dead_letter": 1,
        "expired": 0,
    }
    statuses = {path: (await probe.row(ids[path]))["status"] for path in paths}
    assert statuses.pop("/ok") == "delivered"
    assert statuses.pop("/gone") == "dead_letter"
    assert set(statuses.values()) == {"pending"}
    for dispatch_id in ids.values():
        history = await probe.history(dispatch_id)
        assert history[-1]["status"] == (await probe.row(dispatch_id))["status"]
        assert len(history) == 3  # enqueued, claimed, the outcome
    assert not [r for r in caplog.records if r.exc_info or r.levelname in ("ERROR", "CRITICAL")]
