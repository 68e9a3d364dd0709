"""``ServeProcess``: a real ``studio serve`` (``python -m studio_cli serve``) in a child process.

The harness for tests that need what a thread cannot give: ``kill -9`` and restart on the same
database, a read-only directory met without root's override, a descriptor limit, the server's
own memory and descriptors. Two shapes share it: an isolated server on a SQLite file
(``ServeProcess(base)``, started by :meth:`~ServeProcess.start`) and a node of a cluster on a
database URL (:meth:`ServeProcess.node`, serving when it returns).
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from studio_state.testing import db_rows, free_port, wait_for

_RUNNING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")

# Permission bits do not stop root: a process that must meet them (a read-only directory)
# first drops CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH from its bounding set, then execs argv.
_DROP_DAC = textwrap.dedent(
    """
    import ctypes, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    if os.geteuid() == 0 and libc.prctl(23, 1, 0, 0, 0) == 1:  # PR_CAPBSET_READ
        for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    os.execv(sys.argv[1], sys.argv[1:])
    """
)


def isolated_env(base: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The parent's environment minus every Studio variable, HOME = ``base``, fast ticks.

    Children's ``python3`` is this interpreter (``base/bin`` comes first on ``PATH``); the
    command allowlist is ``python3,sh`` and the zone UTC unless ``extra`` says otherwise.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LIONAGI_", "STUDIO_", "FAKE_LI")) and k != "GITHUB_TOKEN"
    }
    bindir = base / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    python3 = bindir / "python3"
    if not python3.exists():
        python3.symlink_to(sys.executable)
    env.update(
        HOME=str(base),
        PATH=f"{bindir}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
        PYTHONUNBUFFERED="1",
        LIONAGI_STUDIO_TICK_SECONDS="1",
        LIONAGI_SCHEDULER_COMMAND_ALLOWLIST="python3,sh",
        LIONAGI_SCHEDULER_TZ="UTC",
    )
    env.update(extra or {})
    return env


class ServeProcess:
    """``python -m studio_cli serve`` in a subprocess: start, health, kill -9, restart.

    ``base`` is its ``HOME`` (and working directory); ``db`` a SQLite file (default
    ``base/state.db``) or a database URL. The environment is :func:`isolated_env` plus ``env``,
    or with ``inherit_env`` this process's own plus ``env``. ``port`` 0 takes a free port at
    each start. ``own_session`` starts it in a session of its own, so :meth:`kill` takes the
    children it runs too. ``unprivileged`` drops root's DAC override (file permissions apply);
    ``nofile`` is its ``RLIMIT_NOFILE`` (soft, hard). ``on_kill9`` is called after each
    :meth:`kill9`. Each start logs (stdout + stderr) to ``base/<name>-<n>.log``.
    """

    def __init__(
        self,
        base: Path,
        *,
        db: Path | str | None = None,
        name: str = "studio",
        env: Mapping[str, str] | None = None,
        inherit_env: bool = False,
        port: int = 0,
        own_session: bool = False,
        unprivileged: bool = False,
        nofile: tuple[int, int] | None = None,
        on_kill9: Callable[[], None] | None = None,
    ) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.base = base
        self.name = name
        self.db: Path | str = db if db is not None else base / "state.db"
        self.env = {**os.environ, **(env or {})} if inherit_env else isolated_env(base, env)
        self.port = port
        self.own_session = own_session
        self.nofile = nofile
        self.on_kill9 = on_kill9
        self.await_scheduler = True
        """Whether :meth:`start` waits for health to say the scheduler runs (else: answers)."""
        self.stop_must_be_graceful = True
        """Whether a :meth:`stop` that has to kill raises ``AssertionError`` (else it only kills:
        a cluster node may be waiting on the children it runs)."""
        self.cwd: Path | None = None if inherit_env else base
        self.prefix: list[str] = []
        if unprivileged:
            dropper = base / "drop_dac.py"
            dropper.write_text(_DROP_DAC)
            self.prefix = [sys.executable, str(dropper)]
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{port}" if port else ""
        self.starts = 0
        self.log_path = base / f"{name}-0.log"
        self._client: httpx.Client | None = None
        self._client_url = ""

    @classmethod
    def node(
        cls,
        name: str,
        db: str,
        home: Path,
        *,
        node_url: str | bool = True,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> ServeProcess:
        """One node of a cluster on the database URL ``db``, serving when this returns.

        ``home`` is its ``HOME``, its run logs under ``home/runs``; it inherits this
        process's environment. ``node_url``: ``True`` advertises its own address as
        ``LIONAGI_STUDIO_NODE_URL``, ``False`` none, a string that URL (one nothing answers
        on, say). ``env`` adds or overrides variables.
        """
        port = free_port()
        own = f"http://127.0.0.1:{port}"
        advertised = own if node_url is True else (node_url or "")
        variables = {
            "HOME": str(home),
            "LIONAGI_STUDIO_NODE_ID": name,
            "LIONAGI_STUDIO_TICK_SECONDS": "0.5",
            "LIONAGI_STUDIO_RUN_LOG_DIR": str(home / "runs"),
            "LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": "sh,sleep,true",
            **({"LIONAGI_STUDIO_NODE_URL": advertised} if advertised else {}),
            **(env or {}),
        }
        server = cls(
            home, db=db, name=name, env=variables, inherit_env=True, port=port, own_session=True
        )
        if not advertised:
            server.env.pop("LIONAGI_STUDIO_NODE_URL", None)
        server.await_scheduler = False
        server.stop_must_be_graceful = False
        server.start(timeout)
        return server

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def runs(self) -> Path:
        """Where its run logs go (``LIONAGI_STUDIO_RUN_LOG_DIR``, else beside the SQLite file)."""
        if configured := self.env.get("LIONAGI_STUDIO_RUN_LOG_DIR"):
            return Path(configured)
        if isinstance(self.db, Path):
            return self.db.parent / "runs"
        return self.base / ".lionagi" / "studio" / "runs"

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the server process without waiting for it."""
        self.starts += 1
        self.log_path = self.base / f"{self.name}-{self.starts}.log"
        argv = [sys.executable, "-m", "studio_cli", "serve", "--port", str(self.port)]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, *argv, "--db", str(self.db)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=self.own_session,
                preexec_fn=None if self.nofile is None else self._limit_nofile,
            )
        return self.proc

    def _limit_nofile(self) -> None:  # in the child, before exec (as `ulimit -n` would)
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, self.nofile)

    def start(self, timeout: float = 60.0) -> str:
        """Start and wait until ``/api/health`` answers (with the scheduler running, unless
        :attr:`await_scheduler` is off); return the base URL."""
        proc = self.spawn()
        deadline = time.monotonic() + timeout
        while True:
            found = _RUNNING.search(self.log())
            if found:
                break
            if proc.poll() is not None:
                raise AssertionError(
                    f"studio serve {self.name} exited with {proc.returncode}:\n{self.log()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"studio did not start within {timeout}s:\n{self.log()}")
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{found.group(1)}"
        wait_for(
            lambda: self._ready(self.health()),
            timeout=max(1.0, deadline - time.monotonic()),
            what="health says the scheduler runs" if self.await_scheduler else "health answers",
        )
        return self.url

    def _ready(self, health: dict[str, Any] | None) -> bool:
        if health is None:
            return False
        return bool(health.get("scheduler", {}).get("running")) or not self.await_scheduler

    def restart(self) -> str:
        """Start again (after :meth:`kill9` or :meth:`stop`) on the same database."""
        return self.start()

    def kill9(self) -> None:
        """SIGKILL the server alone (its children live on, as after a real crash)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        if self.on_kill9 is not None:
            self.on_kill9()

    def kill(self) -> None:
        """``kill -9`` of its process group (the server and the children it runs) when it has
        a session of its own, else of the server; waited for."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if self.own_session:
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
        proc.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (a graceful shutdown); if it does not exit in time, :meth:`kill` (and
        ``AssertionError`` while :attr:`stop_must_be_graceful`). Returns its exit status."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc is not None else 0
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            if self.stop_must_be_graceful:
                raise AssertionError(
                    f"studio did not stop within {timeout}s:\n{self.log()}"
                ) from None
            return proc.returncode

    def close(self) -> None:
        """Close the kept-alive HTTP connection."""
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def pid(self) -> int:
        """The server's process id."""
        assert self.proc is not None
        return self.proc.pid

    def open_descriptors(self) -> int:
        """How many file descriptors the server process holds now."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def rss_kib(self) -> int:
        """The server's resident set size (VmRSS) in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def log(self) -> str:
        """The log of the latest start ('' before the first)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def all_logs(self) -> str:
        """The logs of every start, in order."""
        paths = (self.base / f"{self.name}-{n}.log" for n in range(1, self.starts + 1))
        return "".join(path.read_text(errors="replace") for path in paths if path.exists())

    # -- HTTP -------------------------------------------------------------------------------
    def health(self) -> dict[str, Any] | None:
        """``GET /api/health``'s JSON, or ``None`` while it does not answer with JSON."""
        try:
            response = httpx.get(f"{self.url}/api/health", timeout=10)
        except httpx.HTTPError:
            return None
        if not response.headers.get("content-type", "").startswith("application/json"):
            return None
        return dict(response.json())

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request on a kept-alive connection (a new one after a restart)."""
        kwargs.setdefault("timeout", 30)
        if self._client is None or self._client_url != self.url:
            if self._client is not None:
                self._client.close()
            self._client, self._client_url = httpx.Client(), self.url
        try:
            return self._client.request(method, f"{self.url}{path}", **kwargs)
        except httpx.TransportError:
            self._client.close()  # a dead server's connection: the next call reconnects
            self._client = None
            raise

    def get(self, path: str, **params: Any) -> Any:
        """``GET path`` (query ``params``): the JSON answer; an error status raises
        ``httpx.HTTPStatusError``."""
        answer = httpx.get(f"{self.url}{path}", params=params, timeout=30)
        answer.raise_for_status()
        return answer.json()

    def post(self, path: str, body: Any = None) -> Any:
        """``POST path`` with the JSON ``body``: the JSON answer; an error status raises
        ``httpx.HTTPStatusError``."""
        answer = httpx.post(f"{self.url}{path}", json=body, timeout=30)
        answer.raise_for_status()
        return answer.json()

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Read its database on a short-lived connection of its own; rows as dicts."""
        return db_rows(self.db, sql, params)
