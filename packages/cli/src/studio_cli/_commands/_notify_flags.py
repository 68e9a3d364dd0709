"""``--notify-to``, ``--notify-on``, ``--notify-ack``, ``--notify-max-attempts``: the ``notify``
object of a schedule (create/update) or an ad-hoc run (``studio run``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

NOTIFY_OPTIONS: list[Callable[[Any], Any]] = [
    click.option(
        "--notify-to",
        metavar="DEST",
        help="Notify DEST of run outcomes: an http(s):// URL (webhook) or an argv destination.",
    ),
    click.option(
        "--notify-on",
        metavar="EVENTS",
        help="Comma-separated outcomes to notify: completed, failed, timed_out, cancelled, "
        "disabled, recovered (default failed,timed_out,disabled).",
    ),
    click.option(
        "--notify-ack",
        is_flag=True,
        default=None,
        help="Resend each notification until the receiver acks it.",
    ),
    click.option(
        "--notify-max-attempts",
        type=int,
        metavar="N",
        help="Sends per notification before it is dead-lettered (default 8).",
    ),
]


def notify_options(func: F) -> F:
    """Add the notify flags to a command."""
    for decorator in reversed(NOTIFY_OPTIONS):
        func = decorator(func)
    return func


def notify_changes(opts: Mapping[str, Any]) -> dict[str, Any]:
    """The notify keys the flags give (empty when no notify flag was given)."""
    out: dict[str, Any] = {}
    if opts.get("notify_to") is not None:
        out["deliver_to"] = opts["notify_to"]
    if opts.get("notify_on") is not None:
        out["on"] = [part.strip() for part in str(opts["notify_on"]).split(",") if part.strip()]
    if opts.get("notify_ack"):
        out["ack_required"] = True
    if opts.get("notify_max_attempts") is not None:
        out["max_attempts"] = opts["notify_max_attempts"]
    return out


def new_notify(opts: Mapping[str, Any]) -> dict[str, Any] | None:
    """The notify object of a new schedule or run, or ``None`` without notify flags."""
    changes = notify_changes(opts)
    if not changes:
        return None
    if "deliver_to" not in changes:
        raise click.UsageError("--notify-on/--notify-ack/--notify-max-attempts need --notify-to")
    return changes
