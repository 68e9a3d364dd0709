"""A database the engine cannot write is refused at start with DatabaseUnavailable naming it.

Permission bits do not stop root, so the engine runs in a child process that first drops
CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from its bounding set when the tests run as root.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import aiosqlite
import pytest

from studio_scheduler_core import DatabaseUnavailable
from studio_scheduler_core._fire.dbfile import probe_writable
from studio_state import connect, dict_row_factory, ensure_schema

ENGINE = textwrap.dedent(
    """
    import asyncio, ctypes, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    # root ignores permission bits unless these capabilities go (PR_CAPBSET_READ = 23)
    if os.geteuid() == 0 and libc.prctl(23, 1, 0, 0, 0) == 1:
        for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
        os.execv(sys.executable, [sys.executable, *sys.argv])  # re-exec without them
    """
) + textwrap.dedent(
    """
    from studio_scheduler_core import DatabaseUnavailable, SchedulerEngine, SchedulerSettings

    async def main():
        engine = SchedulerEngine(sys.argv[1], settings=SchedulerSettings())
        try:
            await engine.start(loop=False)
        except DatabaseUnavailable as exc:
            print("refused:", exc)
            return
        await engine.stop()
        print("started")

    asyncio.run(main())
    """
)


def _start_engine(tmp_path: Path, db: Path) -> str:
    script = tmp_path / "engine.py"
    script.write_text(ENGINE)
    result = subprocess.run(
        [sys.executable, str(script), str(db)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize("fault", ["directory", "existing-file-in-directory", "file"])
def test_an_unwritable_database_is_refused_at_start_naming_it(tmp_path: Path, fault: str) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "state.db"
    if fault != "directory":
        assert _start_engine(tmp_path, db) == "started"  # a good database first
    try:
        if fault == "file":
            db.chmod(0o444)
        else:
            folder.chmod(0o555)
        answer = _start_engine(tmp_path, db)
    finally:
        folder.chmod(0o755)
        db.exists() and db.chmod(0o644)
    assert answer.startswith("refused: the database ")
    assert str(db) in answer and "cannot be written" in answer


async def test_probe_refuses_a_read_only_connection(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    async with connect(db) as conn:
        await ensure_schema(conn)
        await probe_writable(conn, str(db))  # writable: no error, nothing changed
    async with aiosqlite.connect(f"file:{db}?mode=ro", uri=True) as conn:
        conn.row_factory = dict_row_factory  # type: ignore[assignment]
        with pytest.raises(DatabaseUnavailable, match="readonly"):
            await probe_writable(conn, str(db))
