"""A throwaway PostgreSQL cluster for tests (the server binaries come from the OS).

:func:`start_cluster` runs ``initdb`` into a fresh directory, starts the server with
``pg_ctl`` on a free loopback port with its unix socket in the same directory, and returns a
:class:`PostgresCluster` whose :attr:`~PostgresCluster.dsn` a driver connects to.
:meth:`PostgresCluster.stop` stops the server and removes the directory. As root the server
runs as the ``postgres`` user (``runuser -u postgres --``), which PostgreSQL requires.

The binaries are found through ``pg_config --bindir`` (Debian: ``/usr/lib/postgresql/N/bin``).
When they are missing, :class:`PostgresUnavailable` says in one line what to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .testing import free_port

INSTALL_HINT = "install PostgreSQL's server binaries: apt-get install -y postgresql"
_RUN_AS = "postgres"


class PostgresUnavailable(RuntimeError):
    """PostgreSQL's server binaries (or the ``postgres`` user, as root) are not on this machine."""


@dataclass(frozen=True, slots=True)
class PostgresCluster:
    """A running throwaway cluster: superuser ``postgres``, database ``postgres``, no password."""

    directory: Path
    bindir: Path
    port: int
    run_as: tuple[str, ...]

    @property
    def dsn(self) -> str:
        """A libpq URL over TCP on 127.0.0.1 (accepted by psycopg and asyncpg)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def socket_dir(self) -> Path:
        """The directory holding the server's unix socket."""
        return self.directory

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory."""
        try:
            subprocess.run(
                [
                    *self.run_as,
                    str(self.bindir / "pg_ctl"),
                    "stop",
                    "-D",
                    str(self.data),
                    "-m",
                    "fast",
                    "-w",
                ],
                check=False,
                capture_output=True,
                timeout=60,
            )
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    @property
    def data(self) -> Path:
        """The cluster's data directory."""
        return self.directory / "data"


def find_bindir() -> Path:
    """The directory of ``initdb``/``pg_ctl``, from ``pg_config --bindir``."""
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        raise PostgresUnavailable(f"pg_config not found on PATH: {INSTALL_HINT}")
    out = subprocess.run(
        [pg_config, "--bindir"], check=True, capture_output=True, text=True, timeout=30
    )
    bindir = Path(out.stdout.strip())
    for name in ("initdb", "pg_ctl", "postgres"):
        if not (bindir / name).is_file():
            raise PostgresUnavailable(f"{bindir / name} is missing: {INSTALL_HINT}")
    return bindir


def _run_as() -> tuple[str, ...]:
    if os.geteuid() != 0:
        return ()
    runuser = shutil.which("runuser")
    if runuser is None:
        raise PostgresUnavailable("running as root needs runuser (util-linux) to drop to postgres")
    try:
        import pwd

        pwd.getpwnam(_RUN_AS)
    except KeyError:
        raise PostgresUnavailable(
            f"running as root needs the postgres user: {INSTALL_HINT}"
        ) from None
    return (runuser, "-u", _RUN_AS, "--")


def start_cluster(
    base: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    settings: Mapping[str, str] | None = None,
) -> PostgresCluster:
    """Create and start a cluster in a new directory under ``base`` (default: the temp dir).

    ``env`` is added to the server's environment (``LOCPATH``, say); ``settings`` are server
    settings given on its command line (``{"lc_messages": "de_DE.UTF-8"}``, say).
    """
    bindir = find_bindir()
    run_as = _run_as()
    directory = Path(tempfile.mkdtemp(prefix="studio-pg-", dir=base))
    if run_as:
        shutil.chown(directory, user=_RUN_AS, group=_RUN_AS)
    data = directory / "data"
    try:
        _check(
            [
                *run_as,
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ],
            "initdb",
        )
        for _ in range(5):
            port = free_port()
            options = (
                f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=50"
            ) + "".join(f" -c {name}={value}" for name, value in (settings or {}).items())
            started = subprocess.run(
                [
                    *run_as,
                    str(bindir / "pg_ctl"),
                    "start",
                    "-D",
                    str(data),
                    "-w",
                    "-t",
                    "60",
                    "-l",
                    str(directory / "server.log"),
                    "-o",
                    options,
                ],
                capture_output=True,
                text=True,
                timeout=90,
                env={**os.environ, **(env or {})},
            )
            if started.returncode == 0:
                return PostgresCluster(directory, bindir, port, run_as)
        log = (directory / "server.log").read_text(errors="replace")[-2000:]
        raise PostgresUnavailable(f"pg_ctl start failed: {started.stderr.strip()} {log}")
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


def _check(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise PostgresUnavailable(f"{what} failed: {(done.stderr or done.stdout).strip()}")


def build_locale(locale: str, directory: Path) -> str:
    """Compile the glibc locale ``locale`` (``de_DE``, say) in UTF-8 into ``directory`` with
    ``localedef`` and return its name (``de_DE.UTF-8``): a server started with
    ``LOCPATH=<directory>`` in its environment can then use it (``lc_messages``) on a
    machine that has no locale installed. The directory is made readable by the server's
    user. :class:`PostgresUnavailable` when ``localedef`` or the locale's source is missing.
    """
    localedef = shutil.which("localedef")
    if localedef is None:
        raise PostgresUnavailable("building a locale needs localedef (glibc's locales package)")
    name = f"{locale}.UTF-8"
    directory.mkdir(parents=True, exist_ok=True)
    _check([localedef, "-i", locale, "-f", "UTF-8", str(directory / name)], "localedef")
    for path in (directory, *directory.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return name
