from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[2]  # .../packages


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="session")
def outbox_only_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with only ``pip install packages/state packages/outbox`` in it."""
    venv = tmp_path_factory.mktemp("outbox-only") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=_env(), timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            str(PACKAGES / "state"),
            str(PACKAGES / "outbox"),
        ],
        check=True,
        env=_env(),
        timeout=300,
        capture_output=True,
    )
    return python


@pytest.mark.slow
def test_outbox_installs_alone_without_studio_dependencies(outbox_only_venv: Path) -> None:
    probe = textwrap.dedent(
        """
        import importlib.util
        missing = [m for m in ("fastapi", "croniter", "httpx", "psycopg", "asyncpg",
                               "studio_scheduler_core", "studio_api", "studio_cli")
                   if importlib.util.find_spec(m)]
        assert not missing, missing
        import studio_outbox, studio_state
        print(studio_outbox.__file__)
        """
    )
    result = subprocess.run(
        [str(outbox_only_venv), "-c", probe],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert str(outbox_only_venv.parents[1]) in result.stdout  # not this test env's copy


@pytest.mark.slow
def test_outbox_works_alone_end_to_end(outbox_only_venv: Path, tmp_path: Path) -> None:
    db = tmp_path / "producer.db"
    producer = textwrap.dedent(
        """
        import asyncio, sys
        import studio_state, studio_outbox
        async def main():
            async with studio_state.connect(sys.argv[1]) as conn:
                await studio_outbox.ensure_schema(conn)
                await conn.execute("CREATE TABLE orders (id TEXT PRIMARY KEY)")
                await conn.execute("BEGIN IMMEDIATE")
                await conn.execute("INSERT INTO orders VALUES ('o1')")
                await studio_outbox.enqueue_dispatch(
                    conn, kind="order_created", deliver_to="ops", body={"order": "o1"},
                    dedup_key="order:o1")
                await conn.commit()
        asyncio.run(main())
        """
    )
    env = _env()
    subprocess.run(
        [str(outbox_only_venv), "-c", producer, str(db)], check=True, env=env, timeout=60
    )
    result = subprocess.run(
        [
            str(outbox_only_venv),
            "-m",
            "studio_outbox",
            "deliver",
            "--db",
            str(db),
            "--template",
            '["/bin/true", "{deliver_to}", "{payload}"]',
            "--once",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "delivered=1" in result.stdout
