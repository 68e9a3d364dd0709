"""The engine's ``delivery_paused`` on either backend: paused only while a ``pending`` row waits
for a transport this engine lacks (here: argv rows with no ``notify_template``), named with
how many rows wait; URL rows, which the webhook transport takes, never pause it."""

from __future__ import annotations

from studio_outbox import enqueue_dispatch
from studio_scheduler_core._engine.delivery import BACKLOG_EVERY
from studio_state import connect


async def test_pending_rows_pause_delivery_only_without_their_transport(
    make_engine, clock, db_target
) -> None:
    engine = await make_engine(clock=clock)  # no notify_template: argv rows cannot go
    await engine.tick_once()
    health = engine.health()
    assert health["delivery_paused"] is False
    assert health["delivery_paused_transports"] == []
    assert health["delivery_paused_reason"] is None
    async with connect(db_target) as other:  # a producer on its own connection
        # a URL row (the receiver is not there: it is retried, never paused) and two argv rows
        await enqueue_dispatch(
            other, kind="k", deliver_to="http://127.0.0.1:9/hook", body={}, clock=clock
        )
        for i in range(2):
            await enqueue_dispatch(other, kind="k", deliver_to="ops", body={"i": i}, clock=clock)
    clock.advance(BACKLOG_EVERY)
    await engine.tick_once()
    health = engine.health()
    assert health["delivery_paused"] is True
    assert health["delivery_paused_transports"] == ["argv"]
    assert health["delivery_paused_dispatches"] == {"argv": 2}
    # the two argv rows stay due (the URL row may be due still, or retried later)
    assert health["dispatch_backlog"] in (2, 3)
    assert health["delivery_paused_reason"] == (
        "no notify_template (LIONAGI_STUDIO_NOTIFY_TEMPLATE) for 2 argv dispatches"
    )
    await engine.wait_idle()
