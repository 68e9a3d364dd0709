"""The budget gate of a follow-up: checked before each child of a chain is prepared.

A follow-up takes no slot or max_runs claim, but it spends the schedule's budget like any run.
When the schedule's spend has reached its budget the chain stops there, and a ``skipped`` run
row (``run.skipped.budget``) linked to the parent records where and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .._admission.store import schedule_spend
from .._schedules.followups import apply_overlay
from .env import FireEnv, Prepared
from .occurrence import ScheduleClaim, skipped_run, write_skip

FOLLOW_UP_BUDGET = "run.skipped.budget"


async def follow_up_refused(
    env: FireEnv, parent: Prepared, overlay: Mapping[str, Any], context: Mapping[str, Any]
) -> bool:
    """Whether the budget refuses the follow-up of ``parent``; a refusal is recorded."""
    schedule = parent.schedule
    budget_usd, budget_tokens = schedule.budget_usd, schedule.budget_tokens
    if budget_usd is None and budget_tokens is None:
        return False
    sid = schedule.id
    cost, tokens = await schedule_spend(env.conn, sid)
    over_usd = budget_usd is not None and cost >= float(budget_usd)
    over_tokens = budget_tokens is not None and tokens >= int(budget_tokens)
    if not (over_usd or over_tokens):
        return False
    now = env.clock()
    summary = (
        f"follow-up not run, budget exhausted: spent ${cost:.4f} and {tokens} tokens "
        f"(budget_usd={budget_usd}, budget_tokens={budget_tokens})"
    )
    run, transition = skipped_run(
        schedule_id=sid,
        action_kind=apply_overlay(schedule, overlay).action_kind,
        reason_code=FOLLOW_UP_BUDGET,
        summary=summary,
        context={**context, "skipped": FOLLOW_UP_BUDGET},
        now=now,
        metadata={
            "cost_usd": cost,
            "tokens": tokens,
            "budget_usd": budget_usd,
            "budget_tokens": budget_tokens,
        },
    )
    run = replace(run, chain_parent_id=parent.run_id, chain_depth=parent.chain_depth + 1)
    await write_skip(
        env.conn,
        claim=ScheduleClaim("follow_up", sid),
        run=run,
        transitions=[transition],
        now=now,
    )
    return True
