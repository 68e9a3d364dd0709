"""What retention walks, deletes and archives in each table, as SQL on the writer's thread.

Three walks: terminal runs (with their invocations, sessions and transitions), terminal
dispatches (with their transitions; ``delivered``/``acked`` and dead letters —
``dead_letter``/``expired`` — each by their own window), and audit rows.

**Audit rows** are ``status_transitions`` rows whose ``actor`` is an operator's: a token's name,
``auth-token``, ``api``, ``cli``/``cli:<user>``, ``set:<owner>``, ``operator`` — anything but
Studio's own actors (:data:`STUDIO_ACTORS`) and ``NULL``. When retention deletes a run or a
dispatch, its audit rows stay behind (the archive holds them too), so "who cancelled this
run" outlives the run; the audit walk deletes them once they are older than the audit window
and their entity is gone (a ``maintenance`` row has no entity: it goes by age alone).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .archive import ArchiveLine
from .store import fold_pruned_runs_sync

TERMINAL_RUN = ("completed", "failed", "timed_out", "cancelled", "skipped")
LIVE_RUN = ("queued", "waiting_dependency", "running", "retry_wait")
DONE_DISPATCH = ("delivered", "acked")
DEAD_DISPATCH = ("dead_letter", "expired")
TERMINAL_DISPATCH = DONE_DISPATCH + DEAD_DISPATCH

STUDIO_ACTORS = (
    "studio",
    "scheduler",
    "schedule_service",
    "adhoc_service",
    "adhoc_worker",
    "worker",
    "scheduler_reaper",
    "scheduler_leader_takeover",
    "scheduler_startup_reconciliation",
    "studio_outbox",
    "studio_outbox.delivery",
    "consumer",
)
"""Actors that are Studio itself (the engine, its workers, the outbox's delivery, a receiver
acking with its dispatch token): their rows are not audit rows."""

# the table each entity type of status_transitions lives in (maintenance rows have none)
_ENTITY_TABLES = {
    "schedule": "schedules",
    "schedule_run": "schedule_runs",
    "invocation": "invocations",
    "dispatch": "dispatch_outbox",
    "token": "api_tokens",
}

Snapshot = dict[str, list[ArchiveLine]]
"""Each entity's rows to archive, by the entity's id."""


def marks(values: Sequence[Any]) -> str:
    """``?, ?, ...``: one placeholder per value."""
    return ", ".join("?" * len(values))


def _studio_rows() -> str:
    return f"(actor IS NULL OR actor IN ({marks(STUDIO_ACTORS)}))"


def _rows(db: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[dict[str, object]]:
    """The rows of ``sql`` as an archive line's columns (each value as stored: opaque here)."""
    out: list[dict[str, object]] = []
    for row in db.execute(sql, tuple(params)).fetchall():
        record = dict(row)
        record.pop("rowid", None)  # PostgreSQL's identity column: not part of the row
        out.append(record)
    return out


def _stamp(row: Mapping[str, object], *names: str) -> float | None:
    """The first of the ``names`` columns that is set (an epoch second), as ``a or b``."""
    value: object = None
    for name in names:
        value = row.get(name)
        if value:
            break
    return value if isinstance(value, int | float) else None


def keep_live_parents(db: sqlite3.Connection, ids: list[str]) -> list[str]:
    """Drop the runs that a run still live points to: its chain parent, or the attempt it
    retries (a retry series stays together until it ends)."""
    m = marks(ids)
    live = db.execute(
        f"SELECT chain_parent_id AS p FROM schedule_runs "
        f"WHERE chain_parent_id IN ({m}) AND status IN ({marks(LIVE_RUN)}) "
        f"UNION SELECT retry_of AS p FROM schedule_runs "
        f"WHERE retry_of IN ({m}) AND status IN ({marks(LIVE_RUN)})",
        (*ids, *LIVE_RUN, *ids, *LIVE_RUN),
    ).fetchall()
    keep = {str(row["p"]) for row in live}
    return [i for i in ids if i not in keep]


def keep_live_entities(db: sqlite3.Connection, ids: list[str]) -> list[str]:
    """Drop the audit rows whose entity still exists (they go with it, or after it)."""
    rows = db.execute(
        f"SELECT id, entity_type, entity_id FROM status_transitions WHERE id IN ({marks(ids)})",
        ids,
    ).fetchall()
    by_type: dict[str, dict[str, list[str]]] = {}
    for row in rows:
        by_type.setdefault(str(row["entity_type"]), {}).setdefault(
            str(row["entity_id"]), []
        ).append(str(row["id"]))
    keep: set[str] = set()
    for entity_type, entities in by_type.items():
        if entity_type == "maintenance":
            continue
        table = _ENTITY_TABLES.get(entity_type)
        if table is None:  # a type this code does not know: keep, never guess
            keep.update(i for rows_of in entities.values() for i in rows_of)
            continue
        names = list(entities)
        for row in db.execute(
            f"SELECT id FROM {table} WHERE id IN ({marks(names)})", names
        ).fetchall():
            keep.update(entities[str(row["id"])])
    return [i for i in ids if i not in keep]


def snapshot_runs(db: sqlite3.Connection, ids: list[str]) -> Snapshot:
    """Each run with its invocations, their sessions and the transitions of all of them."""
    m = marks(ids)
    out: Snapshot = {i: [] for i in ids}
    for run in _rows(db, f"SELECT * FROM schedule_runs WHERE id IN ({m}) ORDER BY id", ids):
        at = _stamp(run, "ended_at", "created_at")
        out[str(run["id"])].append(ArchiveLine("schedule_run", run, at))
    invs = _rows(db, f"SELECT * FROM invocations WHERE schedule_run_id IN ({m}) ORDER BY id", ids)
    owner = {str(inv["id"]): str(inv["schedule_run_id"]) for inv in invs}
    for inv in invs:
        out[owner[str(inv["id"])]].append(ArchiveLine("invocation", inv))
    if owner:
        im = marks(list(owner))
        for session in _rows(
            db, f"SELECT * FROM sessions WHERE invocation_id IN ({im}) ORDER BY id", list(owner)
        ):
            out[owner[str(session["invocation_id"])]].append(ArchiveLine("session", session))
    transitions = _rows(
        db,
        "SELECT * FROM status_transitions WHERE (entity_type = 'schedule_run' "
        f"AND entity_id IN ({m})) OR (entity_type = 'invocation' AND entity_id IN "
        f"({marks(list(owner)) or 'NULL'})) ORDER BY created_at, id",
        [*ids, *owner],
    )
    for row in transitions:
        entity = str(row["entity_id"])
        out[owner.get(entity, entity)].append(ArchiveLine("status_transition", row))
    return out


def snapshot_dispatches(db: sqlite3.Connection, ids: list[str]) -> Snapshot:
    """Each dispatch with its transitions."""
    m = marks(ids)
    out: Snapshot = {i: [] for i in ids}
    for row in _rows(db, f"SELECT * FROM dispatch_outbox WHERE id IN ({m}) ORDER BY id", ids):
        at = _stamp(row, "updated_at", "created_at")
        out[str(row["id"])].append(ArchiveLine("dispatch", row, at))
    for row in _rows(
        db,
        "SELECT * FROM status_transitions WHERE entity_type = 'dispatch' "
        f"AND entity_id IN ({m}) ORDER BY created_at, id",
        ids,
    ):
        out[str(row["entity_id"])].append(ArchiveLine("status_transition", row))
    return out


def snapshot_audit(db: sqlite3.Connection, ids: list[str]) -> Snapshot:
    """The audit rows themselves."""
    out: Snapshot = {i: [] for i in ids}
    for row in _rows(
        db, f"SELECT * FROM status_transitions WHERE id IN ({marks(ids)}) ORDER BY id", ids
    ):
        out[str(row["id"])].append(ArchiveLine("status_transition", row, _stamp(row, "created_at")))
    return out


def delete_runs(db: sqlite3.Connection, ids: list[str]) -> None:
    """Delete runs with their invocations, sessions and the transitions of all of them but
    the audit rows (which the audit walk deletes later); what they counted for ``max_runs``
    and the budgets stays in their schedules' carried totals."""
    fold_pruned_runs_sync(db, ids)
    m = marks(ids)
    invs = [
        str(row["id"])
        for row in db.execute(
            f"SELECT id FROM invocations WHERE schedule_run_id IN ({m})", ids
        ).fetchall()
    ]
    studio = _studio_rows()
    if invs:
        im = marks(invs)
        db.execute(f"DELETE FROM sessions WHERE invocation_id IN ({im})", invs)
        db.execute(
            "DELETE FROM status_transitions WHERE entity_type = 'invocation' "
            f"AND entity_id IN ({im}) AND {studio}",
            (*invs, *STUDIO_ACTORS),
        )
    db.execute(f"DELETE FROM schedule_runs WHERE id IN ({m})", ids)
    if invs:
        db.execute(f"DELETE FROM invocations WHERE id IN ({marks(invs)})", invs)
    db.execute(
        "DELETE FROM status_transitions WHERE entity_type = 'schedule_run' "
        f"AND entity_id IN ({m}) AND {studio}",
        (*ids, *STUDIO_ACTORS),
    )


def delete_dispatches(db: sqlite3.Connection, ids: list[str]) -> None:
    """Delete dispatches with their transitions but the audit rows."""
    m = marks(ids)
    db.execute(f"DELETE FROM dispatch_outbox WHERE id IN ({m})", ids)
    db.execute(
        "DELETE FROM status_transitions WHERE entity_type = 'dispatch' "
        f"AND entity_id IN ({m}) AND {_studio_rows()}",
        (*ids, *STUDIO_ACTORS),
    )


def delete_audit(db: sqlite3.Connection, ids: list[str]) -> None:
    """Delete audit rows."""
    db.execute(f"DELETE FROM status_transitions WHERE id IN ({marks(ids)})", ids)


class Candidate(NamedTuple):
    """What a walk's rule reads of a visited row (``None``: the walk does not select it)."""

    status: str | None
    ended: float | None  # the ``t`` column: when the row ended (else was created)
    actor: str | None


def _candidate(row: Any) -> Candidate:
    ended = row.get("t")
    return Candidate(row.get("status"), None if ended is None else float(ended), row.get("actor"))


@dataclass(frozen=True)
class Walk:
    """One table's walk in a pass: which rows it visits and which of them go."""

    kind: str  # the archive's kind and the report's counter: runs, dispatches, audit
    table: str
    columns: str  # selected beside rowid: at least id, created_at and t (when it ended)
    stop: float  # the walk ends at the first row created at or after this
    qualifies: Callable[[Candidate], bool]
    keep: Callable[[sqlite3.Connection, list[str]], list[str]] | None
    snapshot: Callable[[sqlite3.Connection, list[str]], Snapshot]
    delete: Callable[[sqlite3.Connection, list[str]], None]

    def pick(self, db: sqlite3.Connection, after: int, size: int) -> tuple[int, list[str], bool]:
        """The ids to delete among up to ``size`` rows after ``rowid``: (last rowid visited,
        ids, whether the walk reached its end)."""
        rows = db.execute(
            f"SELECT rowid AS r, {self.columns} FROM {self.table} "
            "WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (after, size),
        ).fetchall()
        last, ids, end = after, [], len(rows) < size
        for row in rows:
            if float(row["created_at"]) >= self.stop:
                end = True
                break
            last = int(row["r"])
            if self.qualifies(_candidate(row)):
                ids.append(str(row["id"]))
        if ids and self.keep is not None:
            ids = self.keep(db, ids)
        return last, ids, end


def walks(
    now: float, *, runs_days: float, done_days: float, dead_days: float, audit_days: float
) -> list[Walk]:
    """The walks of one pass (a window of 0 keeps its rows: no walk, or no rule, for it)."""

    def cutoff(days: float) -> float:
        return now - days * 86400.0

    out: list[Walk] = []
    if runs_days > 0:
        runs_cut = cutoff(runs_days)
        out.append(
            Walk(
                "runs",
                "schedule_runs",
                "id, status, created_at, COALESCE(ended_at, created_at) AS t",
                runs_cut,
                lambda c: c.status in TERMINAL_RUN and c.ended is not None and c.ended < runs_cut,
                keep_live_parents,
                snapshot_runs,
                delete_runs,
            )
        )
    rules = {
        status: cutoff(days)
        for statuses, days in ((DONE_DISPATCH, done_days), (DEAD_DISPATCH, dead_days))
        if days > 0
        for status in statuses
    }
    if rules:
        out.append(
            Walk(
                "dispatches",
                "dispatch_outbox",
                "id, status, created_at, COALESCE(updated_at, created_at) AS t",
                max(rules.values()),
                lambda c: (
                    c.status is not None
                    and c.status in rules
                    and c.ended is not None
                    and c.ended < rules[c.status]
                ),
                None,
                snapshot_dispatches,
                delete_dispatches,
            )
        )
    if audit_days > 0:
        audit_cut = cutoff(audit_days)
        out.append(
            Walk(
                "audit",
                "status_transitions",
                "id, created_at, actor",
                audit_cut,
                lambda c: c.actor is not None and c.actor not in STUDIO_ACTORS,
                keep_live_entities,
                snapshot_audit,
                delete_audit,
            )
        )
    return out
