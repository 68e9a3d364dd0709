"""``studio run ACTION …``: queue an ad-hoc run, and list / show / cancel them.

Queueing writes a ``queued`` row to the database directly (no server needed); the running
server's host task worker claims and executes it (its engine notices the write within about
a second). The action fields are validated exactly as the server does (``AdhocRunService``
with the server's settings from this environment). ``--wait`` follows the run until it is
terminal and exits 0 only when it ended ``completed``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

from .._context import open_db, resolve_db_path, run_async, scheduler_settings
from .._errors import CliError
from .._output import (
    emit_json,
    fmt_duration,
    fmt_time,
    note,
    print_record,
    print_rows,
    say,
    shorten,
)
from .._types import VocabularyChoice, duration_option, read_text
from ._actor import cli_actor
from ._common import (
    db_option,
    is_final_status,
    json_option,
    limit_option,
    offset_option,
    record_json,
)
from ._notify_flags import NOTIFY_OPTIONS, new_notify
from .run_ops import log_file, log_tail, print_failure

if TYPE_CHECKING:
    from studio_scheduler_core import Run

F = TypeVar("F", bound=Callable[..., Any])

POLL_SECONDS = 0.5
QUEUED_HINT_SECONDS = 10.0
_COLUMNS = ("RUN", "STATUS", "QUEUED", "DURATION", "EXIT", "KEY", "ACTION", "REASON")


@click.group("run")
def run_group() -> None:
    """Queue an ad-hoc run (studio run ACTION …), or list, show and cancel ad-hoc runs.

    \b
    Examples:
      studio run agent --model gpt-4.1 "summarise the open issues"
      studio run command --concurrency-key repo-a -- python3 scripts/sync.py --full
      studio run play review --wait
      studio run list --status running
    """


def _common_options(func: F) -> F:
    for decorator in reversed(
        [
            click.option(
                "--cwd",
                type=click.Path(file_okay=False),
                help="Working directory (default: the current directory).",
            ),
            click.option(
                "--concurrency-key",
                metavar="KEY",
                help="At most one running ad-hoc run per key (others wait, oldest first).",
            ),
            click.option(
                "--timeout-sec",
                type=int,
                metavar="SECONDS",
                help="The run's own deadline (1 to 604800 s; default: the server's).",
            ),
            click.option(
                "--wait", is_flag=True, help="Wait until the run ends; exit 1 unless it completed."
            ),
            duration_option("--timeout", help="With --wait: give up after this long."),
            *NOTIFY_OPTIONS,
            db_option,
            json_option,
        ]
    ):
        func = decorator(func)
    return func


def _li_options(func: F) -> F:
    for decorator in reversed(
        [
            click.option("--model", help="Model (li's MODEL positional)."),
            click.option("--prompt", "prompt_option", help="Prompt text (or the PROMPT argument)."),
            click.option(
                "--prompt-file",
                type=click.File("r", encoding="utf-8"),
                metavar="FILE",
                help="Read the prompt from a file ('-' = stdin).",
            ),
            click.option("--project", help="The action's lionagi project (li --project)."),
            click.option(
                "--extra-arg", multiple=True, help="Extra positional argument (repeatable)."
            ),
        ]
    ):
        func = decorator(func)
    return func


def _prompt(argument: str | None, option: str | None, stream: IO[str] | None) -> str | None:
    given = [x for x in (argument, option, stream) if x is not None]
    if len(given) > 1:
        raise click.UsageError("give the prompt once: PROMPT, --prompt or --prompt-file")
    if stream is not None:
        return (read_text("--prompt-file", stream) or "").rstrip("\r\n")
    return argument if argument is not None else option


def _li_fields(opts: dict[str, Any], kind: str, argument: str | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "action_kind": kind,
        "action_model": opts.get("model"),
        "action_agent": opts.get("agent"),
        "action_prompt": _prompt(argument, opts.get("prompt_option"), opts.get("prompt_file")),
        "action_project": opts.get("project"),
    }
    if opts.get("extra_arg"):
        data["action_extra_args"] = list(opts["extra_arg"])
    return data


def _enqueue(data: dict[str, Any], opts: dict[str, Any]) -> None:
    """Queue the run (validated like the server), print it, and follow it with ``--wait``."""
    if opts.get("timeout") is not None and not opts.get("wait"):
        raise click.UsageError("--timeout applies only with --wait")
    fields = {key: value for key, value in data.items() if value is not None}
    cwd = opts.get("cwd")
    fields["action_cwd"] = str(Path(cwd or ".").expanduser().resolve())
    if opts.get("concurrency_key") is not None:
        fields["concurrency_key"] = opts["concurrency_key"]
    if opts.get("timeout_sec") is not None:
        fields["timeout_sec"] = opts["timeout_sec"]
    notify = new_notify(opts)
    if notify is not None:
        fields["notify"] = notify
    db_path = resolve_db_path(opts.get("db"))
    settings = scheduler_settings()

    async def _queue() -> Run:
        from studio_scheduler_core import AdhocRunService

        async with open_db(db_path) as conn:
            return await AdhocRunService(conn, settings=settings).enqueue(fields, actor=cli_actor())

    run = run_async(_queue)
    if opts.get("wait"):
        if not opts.get("as_json"):
            note(f"queued run {run.id}; waiting for the server's worker to run it")
        run = _follow(db_path, run.id, opts.get("timeout"))
    if opts.get("as_json"):
        emit_json(record_json(run))
    if opts.get("wait") and run.status != "completed":
        print_failure(run.status_reason_summary, log_tail(log_file(db_path, run.id)))
        raise CliError(f"run {run.id} ended {run.status} ({_ending(run)})")
    if opts.get("as_json"):
        return
    if opts.get("wait"):
        say(f"run {run.id} {run.status} ({_ending(run)})")
    else:
        say(f"queued run {run.id} ({run.action_kind})")


def _ending(run: Run) -> str:
    parts = [run.status_reason_code or "-"]
    if run.exit_code is not None:
        parts.append(f"exit {run.exit_code}")
    if run.fired_at and run.ended_at:
        parts.append(fmt_duration(run.fired_at, run.ended_at))
    return ", ".join(parts)


def _follow(db_path: Path | str, run_id: str, timeout: int | None) -> Run:
    async def _get() -> Run:
        from studio_scheduler_core import AdhocRunService, SchedulerSettings

        async with open_db(db_path) as conn:
            return await AdhocRunService(conn, settings=SchedulerSettings()).get(run_id)

    started = time.monotonic()
    hinted = False
    while True:
        run = run_async(_get)
        if is_final_status(run.status):
            return run
        waited = time.monotonic() - started
        if timeout is not None and waited >= timeout:
            raise CliError(f"run {run_id} is still {run.status} after {timeout} s")
        if run.status == "queued" and waited >= QUEUED_HINT_SECONDS and not hinted:
            hinted = True
            note("still queued: is the server ('studio serve') running on this database?")
        time.sleep(POLL_SECONDS)


def _li_command(kind: str, help_text: str) -> click.Command:
    @click.argument("prompt", required=False)
    @_li_options
    @_common_options
    def command(prompt: str | None, **opts: Any) -> None:
        _enqueue(_li_fields(opts, kind, prompt), opts)

    if kind == "agent":
        command = click.option("--agent", help="Agent profile (li agent --agent).")(command)
    command.__doc__ = help_text
    return click.command(kind)(command)


run_group.add_command(_li_command("agent", "Queue `li agent [--agent A] -- [MODEL] PROMPT`."))
run_group.add_command(_li_command("flow", "Queue `li o flow -- MODEL PROMPT`."))
run_group.add_command(_li_command("fanout", "Queue `li o fanout -- MODEL PROMPT`."))


@run_group.command("play")
@click.argument("playbook")
@click.argument("prompt", required=False)
@_li_options
@_common_options
def play(playbook: str, prompt: str | None, **opts: Any) -> None:
    """Queue `li play PLAYBOOK [PROMPT]`."""
    _enqueue({**_li_fields(opts, "play", prompt), "action_playbook": playbook}, opts)


run_group.add_command(play, "playbook")


@run_group.command("flow_yaml")
@click.argument("spec", type=click.File("r", encoding="utf-8"), metavar="FILE")
@click.option("--project", help="The action's lionagi project (li --project).")
@_common_options
def flow_yaml(spec: IO[str], project: str | None, **opts: Any) -> None:
    """Queue `li o flow -f FILE`: the flow spec YAML is stored with the run ('-' = stdin)."""
    data = {
        "action_kind": "flow_yaml",
        "action_flow_yaml": read_text("FILE", spec),
        "action_project": project,
    }
    _enqueue(data, opts)


@run_group.command("command")
@click.argument("name")
@click.argument("args", nargs=-1)
@_common_options
def command_kind(name: str, args: Sequence[str], **opts: Any) -> None:
    """Queue NAME [ARGS]… (NAME must be on LIONAGI_SCHEDULER_COMMAND_ALLOWLIST).

    Put `--` before NAME when an argument starts with '-'.
    """
    data = {"action_kind": "command", "action_command": name, "action_command_args": list(args)}
    _enqueue(data, opts)


# -- reads and cancel ----------------------------------------------------------------------
@run_group.command("list")
@click.option("--status", type=VocabularyChoice("RUN_STATUSES"), help="Only runs with this status.")
@limit_option(50)
@offset_option
@db_option
@json_option
def list_runs(status: str | None, limit: int, offset: int, db: str | None, as_json: bool) -> None:
    """List ad-hoc runs, newest first."""
    db_path = resolve_db_path(db, existing=True)

    async def _list() -> tuple[list[Run], int]:
        from studio_scheduler_core import AdhocRunService, SchedulerSettings

        async with open_db(db_path) as conn:
            service = AdhocRunService(conn, settings=SchedulerSettings())
            return await service.list(status=status, limit=limit, offset=offset)

    rows, total = run_async(_list)
    if as_json:
        runs_json = [record_json(r) for r in rows]
        emit_json({"runs": runs_json, "total": total, "limit": limit, "offset": offset})
        return
    table = [
        [
            r.id,
            r.status,
            fmt_time(r.queued_at),
            fmt_duration(r.fired_at, r.ended_at) if r.ended_at else "-",
            "-" if r.exit_code is None else str(r.exit_code),
            shorten(r.concurrency_key or "-", 20),
            r.action_kind,
            shorten(r.status_reason_code or "-", 40),
        ]
        for r in rows
    ]
    print_rows(_COLUMNS, table, empty="no ad-hoc runs")
    if rows and total > len(rows):
        say(f"showing {offset + 1}-{offset + len(rows)} of {total} (use --offset/--limit)")


@run_group.command("show")
@click.argument("run_id")
@db_option
@json_option
def show(run_id: str, db: str | None, as_json: bool) -> None:
    """Show one ad-hoc run."""
    db_path = resolve_db_path(db, existing=True)

    async def _show() -> Run:
        from studio_scheduler_core import AdhocRunService, SchedulerSettings

        async with open_db(db_path) as conn:
            return await AdhocRunService(conn, settings=SchedulerSettings()).get(run_id)

    row = run_async(_show)
    if as_json:
        emit_json(record_json(row))
    else:
        print_record(record_json(row), title=f"run {row.id}")


@run_group.command("cancel")
@click.argument("run_id")
@db_option
@json_option
def cancel(run_id: str, db: str | None, as_json: bool) -> None:
    """Cancel a queued, waiting or running run: ad-hoc, scheduled, follow-up, a planned retry
    or a buffered occurrence (a running one's process group and descendants are terminated; a
    waiting one never starts)."""
    db_path = resolve_db_path(db, existing=True)

    async def _cancel() -> tuple[str, Run]:
        from studio_scheduler_core import (
            AdhocRunService,
            RunNotFound,
            SchedulerSettings,
            read_run_status,
        )

        async with open_db(db_path) as conn:
            service = AdhocRunService(conn, settings=SchedulerSettings())
            found = await read_run_status(conn, run_id)
            if found is None:
                raise RunNotFound(run_id)
            return found.status, await service.cancel(run_id, actor=cli_actor())

    before, row = run_async(_cancel)
    if as_json:
        emit_json(record_json(row))
    else:
        say(f"cancelled run {row.id} (was {before})")
