"""Committing a prepared scheduled fire: its run, invocation and transition rows, with the
schedule claim, in the occurrence transaction."""

from __future__ import annotations

from studio_state import Transition, run_to_completion

from .._terminal import clip
from .env import FireEnv, Prepared
from .occurrence import ScheduleClaim, commit_fire

FIRED_REASON = {
    "scheduled": "schedule.fired.due",
    "manual": "schedule.fired.manual",
    "missed_fire": "schedule.fired.missed_fire",
    "follow_up": "schedule.fired.follow_up",
}


async def commit(env: FireEnv, fire: Prepared, claim: ScheduleClaim) -> bool:
    """The occurrence transaction. ``False``: the guard was lost and nothing was written."""
    now = env.clock()
    schedule = fire.schedule
    sid = str(schedule["id"])
    failed = fire.setup_error is not None
    run_status = "failed" if failed else "running"
    fired_reason = FIRED_REASON[fire.kind]
    reason_code, summary = (
        fire.setup_error if fire.setup_error is not None else (fired_reason, "the trigger was due")
    )
    run = {
        "id": fire.run_id,
        "schedule_id": sid,
        "invocation_id": fire.invocation_id,
        "trigger_context": fire.trigger_context,
        "action_kind": schedule.get("action_kind"),
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
    invocation = {
        "id": fire.invocation_id,
        "schedule_run_id": fire.run_id,
        "skill": f"scheduled:{schedule.get('name')}",
        "status": run_status,
        "prompt": fire.prompt,
        "started_at": now,
        "ended_at": now if failed else None,
        "status_reason_code": reason_code if failed else "run.started.ok",
        "status_reason_summary": clip(summary) if failed else None,
        "created_at": now,
        "updated_at": now,
    }
    meta = {"trigger_context": fire.trigger_context, "chain_depth": fire.chain_depth}
    transitions = [
        Transition(
            entity_type="schedule_run",
            entity_id=fire.run_id,
            status="running",
            reason_code=fired_reason,
            reason_summary="the trigger was due",
            evidence_refs=[{"kind": "schedule", "id": sid}],
            actor="scheduler",
            metadata=meta,
            created_at=now,
        ),
        Transition(
            entity_type="invocation",
            entity_id=fire.invocation_id,
            status="running",
            reason_code="run.started.ok",
            evidence_refs=[{"kind": "schedule_run", "id": fire.run_id}],
            actor="scheduler",
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
                actor="scheduler",
                created_at=now,
            )
            for t in transitions
        ]

    async def commit_and_track() -> bool:
        won = await commit_fire(
            env.conn, claim=claim, run=run, invocation=invocation, transitions=transitions, now=now
        )
        if not won:
            fire.discard()
        elif not failed:
            env.committed[fire.run_id] = fire
        return won

    # A caller cancelled while the commit lands must not forget the run it made: shutdown
    # sweeps ``env.committed``, so the commit and its tracking happen together.
    return await run_to_completion(commit_and_track())
