"""Writes that must land even when the task waiting for them is cancelled.

Cancelling a task that awaits a multi-statement write transaction rolls the transaction
back. For most writes that is right (nothing happened), but not for a write whose loss leaves
a row that no process owns: the terminal write of a run whose child has already exited, or
the commit of a fire that the caller would otherwise forget it made. Those writes run
through :func:`run_to_completion`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def run_to_completion(work: Coroutine[Any, Any, T]) -> T:
    """Await ``work`` to its end even if the awaiting task is cancelled meanwhile.

    ``work`` runs as a task of its own. A cancellation of the caller is held back until
    ``work`` has finished (committed, or rolled back because it failed); then
    :class:`asyncio.CancelledError` is raised, so the caller still stops. Without a
    cancellation, ``work``'s result is returned or its exception raised.
    """
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                cancelled = True
                continue
            if task.cancelled():  # the work itself was cancelled (its loop is closing)
                raise
            cancelled = True
            result = task.result()  # raises the work's own exception, if any
        if cancelled:
            raise asyncio.CancelledError
        return result
