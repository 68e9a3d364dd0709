"""The schedule-policy flags of ``studio schedule create/update``: overlap, catch-up window,
jitter, pause on failure and retry. The values go to the schedule service unjudged: it refuses
a bad one naming the field (exit 1), as the API does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import click

from .._types import duration_option

POLICY_OPTIONS: list[Callable[[Any], Any]] = [
    click.option(
        "--overlap-policy",
        "--overlap",
        "overlap",
        metavar="POLICY",
        help="What an occurrence does while a run is in flight: skip, allow, buffer_one, "
        "buffer_all or cancel_other.",
    ),
    duration_option(
        "--catchup-window-sec",
        "catchup_window",
        help="Skip a missed occurrence older than this, even under --missed-fire run_once.",
    ),
    duration_option(
        "--jitter-sec",
        "jitter",
        help="Delay each occurrence by a fixed pseudo-random amount below this.",
    ),
    click.option(
        "--pause-on-failure/--no-pause-on-failure",
        default=None,
        help="Disable the schedule when a run fails after its last retry.",
    ),
    click.option(
        "--retry-max-attempts", type=int, metavar="N", help="Attempts per run, the first included."
    ),
    duration_option("--retry-backoff-sec", "retry_backoff", help="Wait before the first retry."),
    click.option(
        "--retry-backoff-factor", type=float, metavar="X", help="Backoff growth per retry (1..10)."
    ),
    duration_option(
        "--retry-max-backoff-sec", "retry_max_backoff", help="Longest wait between attempts."
    ),
]

POLICY_CLEARABLE: dict[str, tuple[str, Any]] = {
    "catchup-window": ("catchup_window_sec", None),
    "jitter": ("jitter_sec", None),
    "pause-on-failure": ("pause_on_failure", None),
    "retry": ("retry", None),
}
"""``--clear`` names of the policy fields."""

_RETRY_FLAGS = (
    ("retry_max_attempts", "max_attempts"),
    ("retry_backoff", "backoff_sec"),
    ("retry_backoff_factor", "backoff_factor"),
    ("retry_max_backoff", "max_backoff_sec"),
)


def policy_values(opts: Mapping[str, Any]) -> dict[str, Any]:
    """Service fields for the policy flags given (``retry`` holds only the keys given)."""
    data = {
        "overlap_policy": opts.get("overlap"),
        "catchup_window_sec": opts.get("catchup_window"),
        "jitter_sec": opts.get("jitter"),
        "pause_on_failure": opts.get("pause_on_failure"),
    }
    out = {key: value for key, value in data.items() if value is not None}
    retry = {key: opts[flag] for flag, key in _RETRY_FLAGS if opts.get(flag) is not None}
    if retry:
        out["retry"] = retry
    return out


def merge_retry(changes: MutableMapping[str, Any], current: Mapping[str, Any] | None) -> None:
    """On update, retry flags change those keys of the stored retry object (``current``)."""
    if changes.get("retry"):
        changes["retry"] = {**(current or {}), **changes["retry"]}
