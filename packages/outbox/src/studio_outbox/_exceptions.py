"""Errors raised by studio-outbox.

OutboxError (ValueError)
 ├── DispatchNotFound        no dispatch row has the given id
 ├── AckNotRequired          an ack for a row enqueued without ack_required
 ├── AckTokenMismatch        the presented ack token is not the row's
 ├── InvalidDispatchState    the operation does not apply to the row's current status
 ├── InvalidDispatch         bad enqueue arguments (nothing is written)
 ├── InvalidArgument         bad arguments to the other calls (limit, status filter, …)
 │    ├── InvalidNotifyTemplate   a notify_template that cannot be run
 │    └── UnsupportedConnection   ``conn`` is not a connection kind the call takes
 └── CliError                a ``python -m studio_outbox`` error, printed as one line (exit 1)
"""

from __future__ import annotations


class OutboxError(ValueError):
    """Base class of every studio-outbox error."""


class DispatchNotFound(OutboxError):
    """No ``dispatch_outbox`` row has the given id."""

    def __init__(self, dispatch_id: str) -> None:
        self.dispatch_id = dispatch_id
        super().__init__(f"dispatch {dispatch_id!r} not found")


class AckNotRequired(OutboxError):
    """The row was enqueued without ``ack_required``, so it cannot be acknowledged."""

    def __init__(self, dispatch_id: str) -> None:
        self.dispatch_id = dispatch_id
        super().__init__(f"dispatch {dispatch_id!r} does not require an ack (ack_required=0)")


class AckTokenMismatch(OutboxError):
    """The presented ack token does not match the row's (the token is never echoed)."""

    def __init__(self, dispatch_id: str) -> None:
        self.dispatch_id = dispatch_id
        super().__init__(f"the ack token given for dispatch {dispatch_id!r} does not match")


class InvalidDispatchState(OutboxError):
    """The operation is not allowed while the row has its current status."""

    def __init__(self, dispatch_id: str, status: str, message: str) -> None:
        self.dispatch_id = dispatch_id
        self.status = status
        super().__init__(f"dispatch {dispatch_id!r} is {status!r}: {message}")


class InvalidDispatch(OutboxError):
    """An ``enqueue_dispatch`` argument is invalid; ``field`` names it. Nothing was written."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class InvalidArgument(OutboxError):
    """An argument of a query or delivery call is invalid; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class InvalidNotifyTemplate(InvalidArgument):
    """The ``notify_template`` argv list cannot be run."""

    def __init__(self, message: str) -> None:
        super().__init__("notify_template", message)


class UnsupportedConnection(InvalidArgument):
    """``conn`` is not a connection this call takes (its ``field`` is ``conn``).

    ``kind`` is the type given (``module.Class``); nothing was written.
    """

    def __init__(self, kind: str, expected: str) -> None:
        self.kind = kind
        super().__init__("conn", f"must be {expected}, got {kind}")


class CliError(OutboxError):
    """An error of ``python -m studio_outbox``: one line on stderr and exit code 1."""
