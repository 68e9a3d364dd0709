"""Request-body examples shown in the OpenAPI document (``/docs`` offers each in a menu).

One ``ScheduleCreate`` per trigger kind (cron, interval, github_poll, a threshold check) and per
action kind (command, agent, flow, fanout, play, flow_yaml); each is a body the API accepts as
written (the command one once ``python3`` is on ``LIONAGI_SCHEDULER_COMMAND_ALLOWLIST``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SCHEDULE_CREATE_EXAMPLES", "schedule_create_examples"]

#: ``name -> (summary, body)``; the names are distinct so every example can be created once.
_SCHEDULES: dict[str, tuple[str, dict[str, Any]]] = {
    "cron-command": (
        "cron trigger, command action (needs python3 on the command allow-list)",
        {
            "name": "nightly-report",
            "trigger_type": "cron",
            "cron_expr": "0 2 * * *",
            "action_kind": "command",
            "action_command": "python3",
            "action_command_args": ["-c", "print('report')"],
        },
    ),
    "at-command": (
        "at trigger (one-shot at an RFC 3339 instant), command action",
        {
            "name": "migrate-once",
            "trigger_type": "at",
            "at": "2035-01-05T09:00:00+01:00",
            "action_kind": "command",
            "action_command": "python3",
            "action_command_args": ["-c", "print('migrated')"],
        },
    ),
    "interval-agent": (
        "interval trigger, agent action",
        {
            "name": "hourly-triage",
            "trigger_type": "interval",
            "interval_sec": 3600,
            "action_kind": "agent",
            "action_model": "claude/sonnet",
            "action_prompt": "Triage the issues opened in the last hour",
        },
    ),
    "github-agent": (
        "github_poll trigger: an agent reviews each new pull request",
        {
            "name": "review-prs",
            "trigger_type": "github_poll",
            "github_repo": "octo/widgets",
            "github_filter": {"event": "pr_opened", "state": "open"},
            "poll_interval_sec": 300,
            "action_kind": "agent",
            "action_prompt": "review PR #{{pr_number}}: {{pr_title}} ({{pr_url}})",
        },
    ),
    "threshold-agent": (
        "threshold check on a cron cadence: alert when runs fail",
        {
            "name": "failing-runs-alert",
            "trigger_type": "cron",
            "cron_expr": "*/5 * * * *",
            "threshold_config": {
                "metric": "failed_runs",
                "op": "gte",
                "value": 3,
                "window_minutes": 60,
            },
            "action_kind": "agent",
            "action_prompt": "{{value}} runs failed in the last {{window_minutes}} minutes",
        },
    ),
    "interval-flow": (
        "flow action (a model is required)",
        {
            "name": "daily-digest",
            "trigger_type": "interval",
            "interval_sec": 86400,
            "action_kind": "flow",
            "action_model": "claude/sonnet",
            "action_prompt": "Write the daily digest",
        },
    ),
    "interval-fanout": (
        "fanout action (a model is required)",
        {
            "name": "weekly-audit",
            "trigger_type": "interval",
            "interval_sec": 604800,
            "action_kind": "fanout",
            "action_model": "claude/sonnet",
            "action_prompt": "Audit each service's dependencies",
        },
    ),
    "cron-play": (
        "play action: a named playbook",
        {
            "name": "morning-standup",
            "trigger_type": "cron",
            "cron_expr": "0 9 * * 1-5",
            "timezone": "Europe/Paris",
            "action_kind": "play",
            "action_playbook": "standup",
        },
    ),
    "cron-flow-yaml": (
        "flow_yaml action: an inline flow",
        {
            "name": "release-notes",
            "trigger_type": "cron",
            "cron_expr": "0 17 * * 5",
            "action_kind": "flow_yaml",
            "action_flow_yaml": "name: release-notes\nsteps:\n  - prompt: Draft the notes\n",
        },
    ),
}

#: The examples as OpenAPI ``examples`` objects (``summary`` and ``value``), by name.
SCHEDULE_CREATE_EXAMPLES: dict[str, dict[str, Any]] = {
    name: {"summary": summary, "value": body} for name, (summary, body) in _SCHEDULES.items()
}


def schedule_create_examples() -> list[dict[str, Any]]:
    """The example bodies alone, for the model's JSON schema ``examples``."""
    return [body for _, body in _SCHEDULES.values()]
