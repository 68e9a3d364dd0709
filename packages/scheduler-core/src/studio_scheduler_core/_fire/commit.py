"""Committing prepared fires: each one's run, invocation and transition rows, with its
schedule claim, in the occurrence transaction (one transaction for a batch of fires)."""

from __future__ import annotations

from collections.abc import Sequence

from studio_state import Transition, run_to_completion

from .._records.invocation import NewInvocation
from .._records.terminal import clip
from .._records.vocab import ENGINE_ACTOR
from .env import FireEnv, Prepared
from .occurrence import FireWrite, ScheduleClaim, commit_fires

FIRED_REASON = {
    "scheduled": "schedule.fired.due",
    "manual": "schedule.fired.manual",
    "missed_fire": "schedule.fired.missed_fire",
    "follow_up": "schedule.fired.follow_up",
}
#: The summary beside each fired reason (what the run page shows while the run runs).
FIRED_SUMMARY = {
    "scheduled": "the trigger was due",
    "manual": "triggered manually by an operator",
    "missed_fire": "a missed occurrence, fired late (missed_fire_policy run_once)",
    "follow_up": "a follow-up of its parent run",
}


async def commit(env: FireEnv, fire: Prepared, claim: ScheduleClaim) -> bool:
    """The occurrence transaction of one fire. ``False``: the guard was lost and nothing was
    written."""
    return (await commit_batch(env, [(fire, claim)]))[0]


async def commit_batch(env: FireEnv, fires: Sequence[tuple[Prepared, ScheduleClaim]]) -> list[bool]:
    """The occurrence transaction of many fires at once, each under its own claim: ``False``
    at a fire's index when its guard was lost (nothing of it written, its temp file removed).

    The commit and the tracking of what it committed in ``env.committed`` happen together:
    a caller cancelled while the commit lands must not forget the runs it made (shutdown
    sweeps ``env.committed``).
    """
    now = env.clock()
    writes = [
        queued_write(fire, claim, now)
        if env.queue_fires and fire.setup_error is None
        else fire_write(fire, claim, now)
        for fire, claim in fires
    ]

    async def commit_and_track() -> list[bool]:
        won = await commit_fires(env.conn, writes, now=now)
        for (fire, _), landed in zip(fires, won, strict=True):
            if not landed:
                fire.discard()
            elif env.queue_fires and fire.setup_error is None:
                # A worker (of any node) claims it and prepares it again there.
                fire.queued = True
                fire.discard()
            elif fire.setup_error is None:
                env.committed[fire.run_id] = fire
        return won

    return await run_to_completion(commit_and_track())


def fire_actor(fire: Prepared) -> str:
    """Who a fire's transition rows name: the operator of a manual fire (its trigger
    context's ``actor``), otherwise the engine (:data:`ENGINE_ACTOR`)."""
    actor = fire.trigger_context.get("actor") if fire.kind == "manual" else None
    return str(actor) if actor else ENGINE_ACTOR


def fire_write(fire: Prepared, claim: ScheduleClaim, now: float) -> FireWrite:
    """The rows a prepared fire writes: a ``running`` run and invocation (``failed`` when its
    setup was refused) and their transition rows."""
    schedule = fire.schedule
    sid = schedule.id
    failed = fire.setup_error is not None
    run_status = "failed" if failed else "running"
    fired_reason = FIRED_REASON[fire.kind]
    who = fire_actor(fire)
    reason_code, summary = (
        fire.setup_error
        if fire.setup_error is not None
        else (fired_reason, FIRED_SUMMARY[fire.kind])
    )
    run = {
        "id": fire.run_id,
        "schedule_id": sid,
        "invocation_id": fire.invocation_id,
        "trigger_context": fire.trigger_context,
        "action_kind": schedule.action_kind,
        "action_args": fire.argv,
        "status": run_status,
        "chain_parent_id": fire.chain_parent_id,
        "chain_depth": fire.chain_depth,
        "fired_at": now,
        "ended_at": now if failed else None,
        "error_detail": clip(summary) if failed else None,
        "created_at": now,
        "updated_at": now,
        "status_reason_code": reason_code,
        "status_reason_summary": clip(summary),
        "status_evidence_refs": [{"kind": "schedule", "id": sid}],
    }
    invocation = invocation_row(fire, now)
    meta = {"trigger_context": fire.trigger_context, "chain_depth": fire.chain_depth}
    transitions = [
        Transition(
            entity_type="schedule_run",
            entity_id=fire.run_id,
            status="running",
            reason_code=fired_reason,
            reason_summary=FIRED_SUMMARY[fire.kind],
            evidence_refs=[{"kind": "schedule", "id": sid}],
            actor=who,
            metadata=meta,
            created_at=now,
        ),
        Transition(
            entity_type="invocation",
            entity_id=fire.invocation_id,
            status="running",
            reason_code="run.started.ok",
            evidence_refs=[{"kind": "schedule_run", "id": fire.run_id}],
            actor=who,
            created_at=now,
        ),
    ]
    if failed:
        transitions += [
            Transition(
                entity_type=t.entity_type,
                entity_id=t.entity_id,
                previous_status="running",
                status="failed",
                reason_code=reason_code,
                reason_summary=clip(summary),
                actor=who,
                created_at=now,
            )
            for t in transitions
        ]

    return FireWrite(claim=claim, run=run, invocation=invocation, transitions=transitions)


def invocation_row(fire: Prepared, now: float, *, skill: str | None = None) -> NewInvocation:
    """The ``invocations`` row of a fire that starts now (``failed`` at once when its setup
    was refused): the one builder every start uses (a fire's commit, a waiting row's start,
    a worker's claim). ``skill`` defaults to the schedule's (``scheduled:<name>``)."""
    failed = fire.setup_error is not None
    reason, summary = fire.setup_error or ("run.started.ok", "")
    return NewInvocation(
        id=fire.invocation_id,
        schedule_run_id=fire.run_id,
        skill=skill or f"scheduled:{fire.schedule.name}",
        status="failed" if failed else "running",
        prompt=fire.prompt,
        started_at=now,
        ended_at=now if failed else None,
        status_reason_code=reason,
        status_reason_summary=clip(summary) if failed else None,
        created_at=now,
        updated_at=now,
    )


def queued_write(fire: Prepared, claim: ScheduleClaim, now: float) -> FireWrite:
    """The rows of a fire committed for any node's worker: a ``queued`` run (no invocation
    yet: the claim adds it) and its transition row."""
    sid = fire.schedule.id
    fired_reason = FIRED_REASON[fire.kind]
    summary = f"{FIRED_SUMMARY[fire.kind]}; queued for a worker"
    refs = [{"kind": "schedule", "id": sid}]
    run = {
        "id": fire.run_id,
        "schedule_id": sid,
        "trigger_context": fire.trigger_context,
        "action_kind": fire.schedule.action_kind,
        "action_args": fire.argv,
        "status": "queued",
        "chain_parent_id": fire.chain_parent_id,
        "chain_depth": fire.chain_depth,
        "fired_at": now,
        "queued_at": now,
        "created_at": now,
        "updated_at": now,
        "status_reason_code": fired_reason,
        "status_reason_summary": summary,
        "status_evidence_refs": refs,
    }
    transition = Transition(
        entity_type="schedule_run",
        entity_id=fire.run_id,
        status="queued",
        reason_code=fired_reason,
        reason_summary=summary,
        evidence_refs=refs,
        actor=fire_actor(fire),
        metadata={"trigger_context": fire.trigger_context, "chain_depth": fire.chain_depth},
        created_at=now,
    )
    return FireWrite(claim=claim, run=run, invocation=None, transitions=[transition])
