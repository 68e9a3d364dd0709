from __future__ import annotations

import inspect

import studio_outbox
from studio_outbox import abc as outbox_abc
from studio_state.testing import assert_public_api


def test_studio_outbox_exports_a_version() -> None:
    assert studio_outbox.__version__.count(".") == 2
    assert sorted(studio_outbox.__all__) == list(studio_outbox.__all__)
    for name in studio_outbox.__all__:
        assert hasattr(studio_outbox, name), name


def _params(func: object) -> list[tuple[str, str, object]]:
    sig = inspect.signature(func)  # type: ignore[arg-type]
    return [(p.name, p.kind.name, p.default) for p in sig.parameters.values()]


def test_design_section_3_signatures() -> None:
    empty = inspect.Parameter.empty
    kw = "KEYWORD_ONLY"
    pos = "POSITIONAL_OR_KEYWORD"
    assert _params(studio_outbox.enqueue_dispatch) == [
        ("conn", pos, empty),
        ("kind", kw, empty),
        ("deliver_to", kw, empty),
        ("body", kw, None),
        ("dedup_key", kw, None),
        ("ack_required", kw, False),
        ("max_attempts", kw, 8),
        ("expires_at", kw, None),
        ("session_id", kw, None),
        ("schedule_run_id", kw, None),
        ("clock", kw, studio_outbox._enqueue.system_clock),
        ("actor", kw, None),
    ]
    deliver = _params(studio_outbox.deliver_due_dispatches)
    assert deliver[:5] == [
        ("conn", pos, empty),
        ("now", kw, None),
        ("notify_template", kw, None),
        ("limit", kw, 100),
        ("concurrency", kw, 4),
    ]
    assert [name for name, _, _ in deliver[5:]] == [
        "clock",
        "transport",
        "actor",
        "webhook_secret",
        "webhook_transport",
    ]
    assert _params(studio_outbox.ack_dispatch)[:3] == [
        ("conn", pos, empty),
        ("dispatch_id", pos, empty),
        ("token", pos, empty),
    ]
    for func in (studio_outbox.retry_dispatch, studio_outbox.purge_dispatch):
        assert _params(func)[:2] == [("conn", pos, empty), ("dispatch_id", pos, empty)]
        assert all(kind == kw for _, kind, _ in _params(func)[2:])
    assert _params(studio_outbox.get_dispatch) == [
        ("conn", pos, empty),
        ("dispatch_id", pos, empty),
    ]
    assert _params(studio_outbox.list_dispatches) == [
        ("conn", pos, empty),
        ("status", kw, None),
        ("kind", kw, None),
        ("limit", kw, 100),
        ("offset", kw, 0),
    ]
    assert _params(studio_outbox.backoff_seconds) == [("attempt", pos, empty)]
    for name in (
        "ensure_schema",
        "enqueue_dispatch",
        "deliver_due_dispatches",
        "ack_dispatch",
        "retry_dispatch",
        "purge_dispatch",
        "get_dispatch",
        "list_dispatches",
        "count_dispatches",
        "dispatch_backlog",
        "next_due_at",
        "enqueue_many",
    ):
        assert inspect.iscoroutinefunction(getattr(studio_outbox, name)), name


def test_error_classes_are_value_errors_under_one_base() -> None:
    assert issubclass(studio_outbox.OutboxError, ValueError)
    for name in (
        "DispatchNotFound",
        "AckNotRequired",
        "AckTokenMismatch",
        "InvalidDispatchState",
        "InvalidDispatch",
        "InvalidArgument",
        "InvalidNotifyTemplate",
    ):
        assert issubclass(getattr(studio_outbox, name), studio_outbox.OutboxError), name


def test_backoff_formula() -> None:
    got = [studio_outbox.backoff_seconds(a) for a in range(10)]
    assert got == [30, 60, 120, 240, 480, 960, 1800, 1800, 1800, 1800]
    assert all(isinstance(v, int) for v in got)
    assert studio_outbox.backoff_seconds(10_000) == 1800


def test_reason_codes_are_the_design_list() -> None:
    assert set(studio_outbox.DispatchReason.ALL) == {
        "dispatch.pending.enqueued",
        "dispatch.delivering.claimed",
        "dispatch.delivered.transport_ok",
        "dispatch.pending.awaiting_ack",
        "dispatch.pending.retry_backoff",
        "dispatch.dead_letter.max_attempts",
        "dispatch.dead_letter.ack_timeout",
        "dispatch.expired.ttl",
        "dispatch.acked.consumer",
        "dispatch.pending.operator_retry",
        "dispatch.dead_letter.gone",
    }
    assert studio_outbox.DISPATCH_STATUSES == (
        "pending",
        "delivering",
        "delivered",
        "acked",
        "dead_letter",
        "expired",
    )


def test_transport_protocol_lives_in_abc() -> None:
    assert studio_outbox.Transport is outbox_abc.Transport
    assert isinstance(studio_outbox.CommandTransport(["/bin/true"]), outbox_abc.Transport)
    assert studio_outbox.NOTIFY_TIMEOUT_SECONDS == 10.0
    assert studio_outbox.CLAIM_LEASE_SECONDS == 15.0


def test_all_is_sorted_importable_and_exactly_the_public_names() -> None:
    assert_public_api(studio_outbox)
