"""The argv ``notify_template`` transport: one child process per send, never a shell."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, cast

from ._constants import NOTIFY_TIMEOUT_SECONDS, SECRET_ENV_NAMES
from ._exceptions import InvalidNotifyTemplate
from ._orphans import DISPATCH_ATTEMPT_ENV, DISPATCH_ID_ENV, kill_earlier_senders
from ._pidfd import PidfdChild, pidfd_supported
from .abc import DispatchEnvelope, TransportResult

logger = logging.getLogger("studio_outbox")

PAYLOAD_PLACEHOLDER = "{payload}"
DELIVER_TO_PLACEHOLDER = "{deliver_to}"

_STDERR_TAIL_BYTES = 8192
# After the transport exits, how long to keep reading stderr: a grandchild that inherited the
# pipe must not hold the send open (completion is the child's exit, not pipe EOF).
_STDERR_DRAIN_SECONDS = 0.5
_REAP_SECONDS = 5.0


def transport_env(
    env: Mapping[str, str] | None = None, *, passthrough: Iterable[str] = ()
) -> dict[str, str]:
    """The environment a transport child gets: ``env`` (default: this process's) minus secrets.

    Every name in :data:`SECRET_ENV_NAMES` is removed unless ``passthrough`` names it: an
    operator passes a secret through on purpose, never by accident.
    """
    keep = set(passthrough)
    base = os.environ if env is None else env
    return {
        name: value for name, value in base.items() if name not in SECRET_ENV_NAMES or name in keep
    }


_DISPATCH_ID_KEY = DISPATCH_ID_ENV.encode()
_DISPATCH_ATTEMPT_KEY = DISPATCH_ATTEMPT_ENV.encode()


def _encoded(env: Mapping[str, str]) -> dict[bytes, bytes]:
    return {os.fsencode(name): os.fsencode(value) for name, value in env.items()}


def _environ_bytes() -> Mapping[bytes, bytes] | None:
    """``os.environ``'s own store (encoded names and values), where the interpreter has one.

    ``os.environ`` keeps every variable as bytes and decodes on each read; comparing this
    store with a copy tells whether any variable changed without decoding any of them.
    """
    data = getattr(os.environ, "_data", None)
    return data if isinstance(data, dict) else None


def validate_notify_template(template: object) -> list[str]:
    """Return ``template`` as a list of argv strings, or raise :class:`InvalidNotifyTemplate`.

    A template is a non-empty list of strings whose first element (the program) is not blank;
    no element may contain a NUL byte. ``{payload}`` and ``{deliver_to}`` are optional.
    """
    if isinstance(template, str | bytes) or not isinstance(template, Sequence):
        raise InvalidNotifyTemplate(
            f"must be a JSON list of argv strings, got {type(template).__name__}"
        )
    argv = list(template)
    if not argv:
        raise InvalidNotifyTemplate("must name at least the program to run")
    for index, part in enumerate(argv):
        if not isinstance(part, str):
            raise InvalidNotifyTemplate(
                f"element {index} must be a string, got {type(part).__name__}"
            )
        if "\x00" in part:
            raise InvalidNotifyTemplate(f"element {index} contains a NUL byte")
    if not argv[0].strip():
        raise InvalidNotifyTemplate("element 0 (the program) must not be blank")
    return argv


def render_argv(template: Sequence[str], *, payload: str, deliver_to: str) -> list[str]:
    """Substitute ``{payload}`` and ``{deliver_to}`` where an element is exactly a placeholder.

    Elements that merely contain a placeholder (``--to={deliver_to}``) are left as they are, so
    no value is ever spliced into another argument.
    """
    rendered: list[str] = []
    for part in template:
        if part == PAYLOAD_PLACEHOLDER:
            rendered.append(payload)
        elif part == DELIVER_TO_PLACEHOLDER:
            rendered.append(deliver_to)
        else:
            rendered.append(part)
    return rendered


class CommandTransport:
    """Runs the ``notify_template`` argv for every send (``create_subprocess_exec``, no shell).

    The payload JSON goes in the ``{payload}`` element when the template has one, otherwise on
    stdin (followed by a newline). Exit 0 is success. After ``timeout`` seconds the child's
    whole process group is killed and the send fails. The failure text is the tail of the
    child's stderr (or ``exit N``).

    The child's environment is ``env`` (default: this process's, read at each send) without
    the secrets of :data:`SECRET_ENV_NAMES` (unless ``passthrough`` names them), plus
    ``LIONAGI_DISPATCH_ID`` and ``LIONAGI_DISPATCH_ATTEMPT``. Before a resend (attempt > 1),
    transports of earlier attempts of the same dispatch still running are killed: their sender
    died mid-send (a live sender ends every send inside the claim lease), so they are orphans.
    """

    __slots__ = (
        "_env",
        "_inherited",
        "_passthrough",
        "_payload_in_argv",
        "_seen",
        "_template",
        "timeout",
    )

    def __init__(
        self,
        template: Sequence[str],
        *,
        timeout: float = NOTIFY_TIMEOUT_SECONDS,
        env: Mapping[str, str] | None = None,
        passthrough: Iterable[str] = (),
    ) -> None:
        self._template = validate_notify_template(template)
        self._passthrough = frozenset(passthrough)
        self._env = (
            None if env is None else _encoded(transport_env(env, passthrough=self._passthrough))
        )
        # The inherited environment, filtered and encoded, and the state of os.environ it was
        # built from: rebuilt only when os.environ has changed since the last send.
        self._seen: dict[bytes, bytes] | None = None
        self._inherited: dict[bytes, bytes] = {}
        self._payload_in_argv = PAYLOAD_PLACEHOLDER in self._template
        if not timeout > 0:
            raise InvalidNotifyTemplate(f"timeout must be positive, got {timeout!r}")
        self.timeout = float(timeout)

    @property
    def template(self) -> list[str]:
        """A copy of the validated argv template."""
        return list(self._template)

    def __repr__(self) -> str:
        return f"CommandTransport({self._template!r}, timeout={self.timeout})"

    def _child_env(self, envelope: DispatchEnvelope) -> dict[bytes, bytes]:
        """The child's environment, as bytes (what ``execve`` takes; nothing to re-encode).

        Without an explicit ``env``, this process's environment is read at every send: the
        filtered copy is reused while ``os.environ`` still holds what it was built from (one
        comparison of two dicts instead of decoding, filtering and encoding every variable).
        """
        if self._env is not None:
            env = dict(self._env)
        else:
            current = _environ_bytes()
            if current is None:
                env = _encoded(transport_env(passthrough=self._passthrough))
            else:
                if current != self._seen:
                    self._seen = dict(current)
                    self._inherited = _encoded(transport_env(passthrough=self._passthrough))
                env = dict(self._inherited)
        env[_DISPATCH_ID_KEY] = os.fsencode(envelope.dispatch_id)
        env[_DISPATCH_ATTEMPT_KEY] = b"%d" % envelope.attempt
        return env

    async def send(self, envelope: DispatchEnvelope) -> TransportResult:
        """Run the template once for ``envelope``."""
        argv = render_argv(self._template, payload=envelope.payload, deliver_to=envelope.deliver_to)
        stdin_data = None if self._payload_in_argv else (envelope.payload + "\n").encode()
        if envelope.attempt > 1:
            # A sender that died mid-send (its lease lapsed, so this attempt was claimed)
            # leaves its transport running: end it before sending again.
            killed = kill_earlier_senders(envelope.dispatch_id, envelope.attempt)
            if killed:
                logger.warning(
                    "dispatch %s: killed %d orphaned sender(s) of an earlier attempt",
                    envelope.dispatch_id,
                    killed,
                )
        env = self._child_env(envelope)
        loop = asyncio.get_running_loop()
        protocol = _Protocol(loop)
        transport: _Child
        try:
            if pidfd_supported():
                # stdin is written by the child handle itself (non-blocking, buffered)
                transport = PidfdChild(loop, protocol, argv, stdin_data=stdin_data, env=env)
            else:
                transport, _ = await loop.subprocess_exec(
                    lambda: protocol,
                    *argv,
                    stdin=subprocess.DEVNULL if stdin_data is None else subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    env=env,
                )
        except OSError as exc:
            return TransportResult.failure(f"notify transport could not start {argv[0]!r}: {exc}")
        try:
            if stdin_data is not None and isinstance(transport, asyncio.SubprocessTransport):
                stdin = transport.get_pipe_transport(0)
                if stdin is not None:
                    # Buffered by the loop; close() flushes it. A child that exits without
                    # reading only makes the pipe break, which is not an error here.
                    cast(asyncio.WriteTransport, stdin).write(stdin_data)
                    stdin.close()
            try:
                async with asyncio.timeout(self.timeout):
                    await protocol.exit_waiter()
            except TimeoutError:
                await _kill_group(transport, protocol)
                return TransportResult.failure(
                    f"notify transport {argv[0]!r} timed out after {self.timeout:g}s and was killed"
                )
            except BaseException:
                await _kill_group(transport, protocol)
                raise
            returncode = transport.get_returncode()
            if returncode == 0:
                return TransportResult.success()
            # Completion is the child's exit, not EOF on stderr: a grandchild that inherited
            # the pipe gets a short grace to flush, then the tail read so far is the error.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.shield(protocol.stderr_closed), _STDERR_DRAIN_SECONDS
                )
            text = bytes(protocol.tail).decode("utf-8", errors="replace").strip()
            return TransportResult.failure(text or f"exit {returncode}")
        finally:
            transport.close()


class _Protocol(asyncio.SubprocessProtocol):
    """Keeps the tail of the child's stderr and signals its exit (independent of the pipes)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.tail = bytearray()
        self.stderr_closed: asyncio.Future[None] = loop.create_future()
        self._loop = loop
        self._exited = False
        self._exit_waiters: list[asyncio.Future[None]] = []

    def exit_waiter(self) -> asyncio.Future[None]:
        """A new future that resolves once the child has exited (at once if it has).

        Each wait gets its own future, awaited directly: a cancelled wait (a timeout) leaves
        the others, and the kill that follows it, a future that still resolves at the exit.
        """
        waiter: asyncio.Future[None] = self._loop.create_future()
        if self._exited:
            waiter.set_result(None)
        else:
            self._exit_waiters.append(waiter)
        return waiter

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 2:
            self.tail += data
            if len(self.tail) > _STDERR_TAIL_BYTES:
                del self.tail[: len(self.tail) - _STDERR_TAIL_BYTES]

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 2 and not self.stderr_closed.done():
            self.stderr_closed.set_result(None)

    def process_exited(self) -> None:
        self._exited = True
        waiters, self._exit_waiters = self._exit_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class _Child(Protocol):
    """What the transport needs of a running child: asyncio's transport or a PidfdChild."""

    def get_pid(self) -> int: ...
    def get_returncode(self) -> int | None: ...
    def kill(self) -> None: ...
    def close(self) -> None: ...


async def _kill_group(transport: _Child, protocol: _Protocol) -> None:
    """SIGKILL the transport's process group (it leads its own session) and reap it."""
    if transport.get_returncode() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(transport.get_pid(), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            transport.kill()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(protocol.exit_waiter(), _REAP_SECONDS)
