"""Errors raised by studio-scheduler-core.

SchedulerError
 ├── ScheduleValidationError (ValueError)   bad schedule input; ``.field`` names the field
 ├── CronError (ValueError)                 a cron expression is invalid or never fires
 ├── InvalidSettings (ValueError)           a SchedulerSettings value is out of range
 ├── ScheduleNotFound (LookupError)         no schedule with that id (or name)
 ├── ScheduleNameTaken                      another schedule already has that name
 ├── RunNotFound (LookupError)              no schedule run with that id
 ├── RunNotCancellable                      cancel of a run already terminal; ``.status``
 ├── ScheduleHasRunningRuns                 delete of a schedule with running runs (no force)
 ├── ScheduleAtPassed                       enable of an ``at`` schedule that already fired
 ├── FireRefused                            a manual fire was refused; ``.reason_code`` says why
 ├── EngineLocked                           another engine holds the database's lock
 ├── DatabaseUnavailable                    the database cannot be written (read-only, I/O)
 └── InvalidStatsQuery (ValueError)         a stats window or grouping outside its values
"""

from __future__ import annotations


class SchedulerError(Exception):
    """Base class of every studio-scheduler-core error."""


class ScheduleValidationError(SchedulerError, ValueError):
    """A schedule (or usage report) field is invalid; nothing was written."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class InvalidSettings(SchedulerError, ValueError):
    """A :class:`SchedulerSettings` value is invalid; ``.field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class ScheduleNotFound(SchedulerError, LookupError):
    """No schedule has this id (or name)."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(f"schedule {schedule_id!r} not found")


class ScheduleNameTaken(SchedulerError):
    """Another schedule already uses this name."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"name: a schedule named {name!r} already exists")


class RunNotFound(SchedulerError, LookupError):
    """No schedule run has this id."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"schedule run {run_id!r} not found")


class RunNotCancellable(SchedulerError):
    """The run cannot be cancelled: it is already terminal (``.status``)."""

    reason_code = "run.cancel.terminal"

    def __init__(self, run_id: str, status: str) -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(
            f"run {run_id!r} is already {status}; only queued, waiting or running runs cancel"
        )


class ScheduleHasRunningRuns(SchedulerError):
    """A delete without ``force`` of a schedule that has running runs (``.run_ids``)."""

    reason_code = "schedule.delete.running"

    def __init__(self, schedule_id: str, run_ids: list[str]) -> None:
        self.schedule_id = schedule_id
        self.run_ids = run_ids
        super().__init__(
            f"schedule {schedule_id!r} has {len(run_ids)} running run(s) "
            f"({', '.join(run_ids)}); cancel them or delete with force"
        )


class ScheduleAtPassed(SchedulerError):
    """Enabling an ``at`` schedule whose one occurrence has been handled (it fired, or was
    skipped) and whose instant has passed, without a new ``at``; nothing was written."""

    reason_code = "schedule.enable.at_passed"
    field = "at"

    def __init__(self, schedule_id: str, at: str) -> None:
        self.schedule_id = schedule_id
        self.at = at
        super().__init__(
            f"at: {at!r} has passed and schedule {schedule_id!r} already had its one "
            "occurrence (schedule.disabled.once); set a new future 'at' to enable it again"
        )


class FireRefused(SchedulerError):
    """A manual fire was refused by an admission gate (nothing was written)."""

    def __init__(self, reason_code: str, message: str) -> None:
        self.reason_code = reason_code
        self.message = message
        super().__init__(f"{reason_code}: {message}")


class EngineLocked(SchedulerError):
    """Another :class:`SchedulerEngine` already runs on this database."""

    def __init__(self, holder_pid: int | None, lock_path: str) -> None:
        self.holder_pid = holder_pid
        self.lock_path = lock_path
        holder = f"pid {holder_pid}" if holder_pid is not None else "an unknown process"
        super().__init__(
            f"another scheduler engine ({holder}) holds {lock_path}; "
            "only one engine may run per database"
        )


class DatabaseUnavailable(SchedulerError):
    """The engine's database cannot be opened for writing: a read-only file or directory,
    a full disk, an I/O error. ``.path`` is the database, ``.reason`` what SQLite or the OS said.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        name = path.rsplit("/", 1)[-1]
        super().__init__(
            f"the database {path} cannot be written: {reason} (the file and its directory "
            f"must be writable: SQLite keeps {name}-wal and {name}-shm, and the engine its "
            f"{name}.engine.lock, beside it)"
        )


class InvalidStatsQuery(SchedulerError, ValueError):
    """A stats read got a ``window`` or ``by`` outside its values; ``.field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")
