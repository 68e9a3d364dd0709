"""verify_webhook, the whsec_ secret parser and Retry-After parsing, checked against the
independent ``standardwebhooks`` package both ways; the outbox without httpx."""

from __future__ import annotations

import base64
import datetime as dt
import email.utils
import json
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
import standardwebhooks

import studio_outbox
from studio_outbox import (
    InvalidWebhookSecret,
    OutboxError,
    WebhookTransport,
    WebhookVerificationError,
    verify_webhook,
)

SECRET = "whsec_" + base64.b64encode(b"a shared key of thirty-two bytes").decode()
NOW = 1_700_000_000
BODY = json.dumps({"dispatch_id": "d1", "kind": "run.failed", "body": {"run_id": "r1"}})


def _theirs(msg_id: str = "d1", at: int = NOW, body: str = BODY) -> dict[str, str]:
    sig = standardwebhooks.Webhook(SECRET).sign(msg_id, dt.datetime.fromtimestamp(at, dt.UTC), body)
    return {"webhook-id": msg_id, "webhook-timestamp": str(at), "webhook-signature": sig}


def _ours(msg_id: str = "d1", at: int = NOW, body: str = BODY) -> dict[str, str]:
    transport = WebhookTransport(SECRET, clock=lambda: float(at))
    return transport.headers(msg_id, body.encode())


def test_our_signature_equals_standardwebhooks_signature() -> None:
    assert _ours() == {
        "content-type": "application/json",
        "accept-encoding": "identity",
        **_theirs(),
    }


def test_verify_webhook_accepts_what_standardwebhooks_signs() -> None:
    assert verify_webhook(SECRET, _theirs(), BODY, now=NOW) == json.loads(BODY)
    assert verify_webhook(SECRET, _theirs(), BODY.encode(), now=NOW + 299) == json.loads(BODY)


def test_standardwebhooks_accepts_what_we_sign() -> None:
    at = int(time.time())  # the package checks against the real time
    assert standardwebhooks.Webhook(SECRET).verify(BODY, _ours(at=at)) == json.loads(BODY)


def test_header_names_are_read_in_any_case() -> None:
    upper = {name.upper(): value for name, value in _theirs().items()}
    title = [(name.title(), value) for name, value in _theirs().items()]
    assert verify_webhook(SECRET, upper, BODY, now=NOW)["dispatch_id"] == "d1"
    assert verify_webhook(SECRET, title, BODY, now=NOW)["dispatch_id"] == "d1"


def test_one_matching_signature_among_several_suffices() -> None:
    headers = _theirs()
    headers["webhook-signature"] = "v2,abc v1,bm90IGl0 v1,%%% " + headers["webhook-signature"]
    assert verify_webhook(SECRET, headers, BODY, now=NOW)["kind"] == "run.failed"


def _case(change: dict[str, Any], at: int) -> tuple[str, dict[str, str], str]:
    headers = _theirs(at=at)
    if "drop" in change:
        del headers[change["drop"]]
    if "set" in change:
        name, value = change["set"]
        headers[name] = value
    return change.get("secret", SECRET), headers, change.get("body", BODY)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"body": BODY.replace("r1", "r2")}, "no matching v1 signature"),
        ({"secret": "whsec_" + base64.b64encode(b"another key").decode()}, "no matching"),
        ({"drop": "webhook-id"}, "missing webhook-id header"),
        ({"drop": "webhook-timestamp"}, "missing webhook-timestamp header"),
        ({"drop": "webhook-signature"}, "missing webhook-signature header"),
        ({"set": ("webhook-timestamp", "17e8")}, "not whole epoch seconds"),
        ({"set": ("webhook-id", "d2")}, "no matching v1 signature"),
        ({"set": ("webhook-signature", "v2,whatever")}, "no matching v1 signature"),
        ({"now": NOW + 301}, "too old"),
        ({"now": NOW - 301}, "too new"),
    ],
)
def test_a_request_that_does_not_verify_is_refused(change: dict[str, Any], message: str) -> None:
    secret, headers, body = _case(change, NOW)
    with pytest.raises(WebhookVerificationError, match=message) as caught:
        verify_webhook(secret, headers, body, now=change.get("now", NOW))
    assert isinstance(caught.value, OutboxError)
    if "now" in change:
        return
    # the independent verifier refuses the same request, signed at the real time
    secret, headers, body = _case(change, int(time.time()))
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        standardwebhooks.Webhook(secret).verify(body, headers)
    assert verify_webhook(SECRET, _theirs(at=int(time.time())), BODY)  # the unchanged one passes


def test_tolerance_is_configurable_and_the_payload_must_be_a_json_object() -> None:
    assert verify_webhook(SECRET, _theirs(), BODY, now=NOW + 3000, tolerance=3600)
    with pytest.raises(WebhookVerificationError, match="too old"):
        verify_webhook(SECRET, _theirs(), BODY, now=NOW + 11, tolerance=10)
    listed = json.dumps([1, 2])
    with pytest.raises(WebhookVerificationError, match="not a JSON object"):
        verify_webhook(SECRET, _theirs(body=listed), listed, now=NOW)
    with pytest.raises(studio_outbox.InvalidArgument) as caught:
        verify_webhook(SECRET, _theirs(), BODY, now=NOW, tolerance=-1)
    assert caught.value.field == "tolerance"


def test_the_secret_parser_returns_the_key() -> None:
    assert studio_outbox.parse_webhook_secret(SECRET) == b"a shared key of thirty-two bytes"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "must start with 'whsec_'"),
        ("whsec_", "is empty"),
        ("whsec_not base64!", "must be valid base64"),
        ("whsec_abc", "must be valid base64"),  # bad padding
        ("whsec_é", "must be valid base64"),
        (12345, "must be a string"),
    ],
)
def test_the_secret_parser_refuses_a_malformed_value_naming_the_setting(
    value: object, message: str
) -> None:
    with pytest.raises(InvalidWebhookSecret, match=message) as caught:
        studio_outbox.parse_webhook_secret(value, field="LIONAGI_STUDIO_WEBHOOK_SECRET")
    assert caught.value.field == "LIONAGI_STUDIO_WEBHOOK_SECRET"
    assert str(caught.value).startswith("LIONAGI_STUDIO_WEBHOOK_SECRET: ")
    assert isinstance(caught.value, OutboxError)
    if isinstance(value, str) and len(value) > 6:
        assert value[6:] not in str(caught.value)  # never echoes the secret
    with pytest.raises(InvalidWebhookSecret):
        WebhookTransport(value)  # type: ignore[arg-type]


def test_retry_after_values() -> None:
    parse = studio_outbox.parse_retry_after
    assert parse("120", NOW) == 120.0
    assert parse(" 0 ", NOW) == 1.0
    assert parse("99999999", NOW) == 1800.0
    assert parse(email.utils.formatdate(NOW + 90, usegmt=True), NOW) == 90.0
    assert parse(email.utils.formatdate(NOW - 90, usegmt=True), NOW) == 1.0
    assert parse("Wed, 21 Oct 2015 07:28:00", NOW) == 1.0  # no zone: GMT, long past
    for unreadable in (None, "", "soon", "nan", "Mon, 99 Foo 2020"):
        assert parse(unreadable, NOW) is None, unreadable


def test_the_outbox_imports_and_delivers_argv_rows_without_httpx(tmp_path: Any) -> None:
    probe = textwrap.dedent(
        """
        import asyncio, sys
        sys.modules["httpx"] = None  # as if the http extra were not installed
        import studio_outbox, studio_state
        assert not studio_outbox.webhook_transport_available()
        try:
            studio_outbox.WebhookTransport()
        except studio_outbox.WebhookUnavailable as exc:
            print("unavailable:", exc)
        async def main():
            async with studio_state.connect(sys.argv[1]) as conn:
                await studio_outbox.ensure_schema(conn)
                hook = await studio_outbox.enqueue_dispatch(
                    conn, kind="k", deliver_to="https://example.invalid/hook")
                await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="ops")
                counts = await studio_outbox.deliver_due_dispatches(
                    conn, notify_template=["/bin/true"])
                row = await studio_outbox.get_dispatch(conn, hook)
                print(counts["delivered"], row["status"], row["attempt"])
        asyncio.run(main())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "o.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "unavailable: the webhook transport needs httpx: install the extra studio-outbox[http]",
        "1 pending 0",  # the webhook row waits, unspent, for a process that has httpx
    ]
