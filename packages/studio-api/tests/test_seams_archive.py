"""Retention's archive on a served Studio: a full archive disk deletes nothing, marks health
``degraded`` naming the directory and the error, and counts in
``studio_retention_archive_failures_total``; once space returns, the next pass archives and
deletes, and health is ``ok`` again. The new windows are settings naming their variables."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from studio_api import SettingsError, StudioSettings
from studio_outbox import deliver_due_dispatches, enqueue_dispatch
from studio_scheduler_core import ensure_schema
from studio_scheduler_core._recovery.archive import manifests_in, verify_manifest
from studio_scheduler_core.testing import T0
from studio_state import ManualClock, connect
from studio_state.testing import fill_disk, mounted_tmpfs


def test_the_windows_and_the_archive_dir_reach_the_scheduler(tmp_path: Path) -> None:
    s = StudioSettings.from_env({})
    assert (
        s.retention_days,
        s.dispatch_retention_days,
        s.dead_letter_retention_days,
        s.audit_retention_days,
        s.archive_dir,
    ) == (30, 7, 30, 365, None)
    s = StudioSettings.from_env(
        {
            "LIONAGI_STUDIO_DISPATCH_RETENTION_DAYS": "1",
            "LIONAGI_STUDIO_DEAD_LETTER_RETENTION_DAYS": "0",
            "LIONAGI_STUDIO_AUDIT_RETENTION_DAYS": "90",
            "LIONAGI_STUDIO_ARCHIVE_DIR": str(tmp_path / "archive"),
        }
    )
    engine = s.to_scheduler_settings()
    assert (
        engine.dispatch_retention_days,
        engine.dead_letter_retention_days,
        engine.audit_retention_days,
        engine.archive_dir,
    ) == (1, 0, 90, str(tmp_path / "archive"))


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LIONAGI_STUDIO_DISPATCH_RETENTION_DAYS", "-1"),
        ("LIONAGI_STUDIO_DEAD_LETTER_RETENTION_DAYS", "nan"),
        ("LIONAGI_STUDIO_AUDIT_RETENTION_DAYS", "40000"),
        ("LIONAGI_STUDIO_ARCHIVE_DIR", "relative/archive"),
    ],
)
def test_an_invalid_window_or_archive_dir_names_its_variable(variable: str, value: str) -> None:
    with pytest.raises(SettingsError) as info:
        StudioSettings.from_env({variable: value})
    assert variable in str(info.value)


def test_an_archive_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(SettingsError) as info:
        StudioSettings.from_env({"LIONAGI_STUDIO_ARCHIVE_DIR": str(file)})
    assert "LIONAGI_STUDIO_ARCHIVE_DIR" in str(info.value)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path, "64k") as mount:
        yield mount


async def _old_dispatches(db: Path, n: int) -> None:
    """``n`` dispatches delivered long ago (at T0), on the database the server will open."""
    clock = ManualClock(T0)
    async with connect(db) as conn:
        await ensure_schema(conn)
        for i in range(n):
            await enqueue_dispatch(conn, kind="k", deliver_to=f"to-{i}", clock=clock)
        await deliver_due_dispatches(conn, notify_template=["true"], clock=clock)


def _failures(text: str) -> float:
    for family in text_string_to_metric_families(text):
        if family.name == "studio_retention_archive_failures":
            return sum(s.value for s in family.samples if s.name.endswith("_total"))
    raise AssertionError("no studio_retention_archive_failures_total in the scrape")


def test_a_full_archive_disk_degrades_health_until_the_next_pass_archives(
    serve: Any, make_settings: Callable[..., StudioSettings], small_tmpfs: Path, wait: Any
) -> None:
    settings = make_settings(tick_seconds=0.2, reaper_interval_seconds=0.2)
    db = Path(str(settings.db))
    db.parent.mkdir(parents=True, exist_ok=True)
    asyncio.run(_old_dispatches(db, 3))
    archive = small_tmpfs / "archive"
    archive.mkdir()
    filler = fill_disk(small_tmpfs)

    studio = serve(settings.with_overrides(archive_dir=str(archive)))

    def degraded() -> dict[str, Any] | None:
        body: dict[str, Any] = studio.client.get("/api/health").json()
        return body if body["status"] == "degraded" else None

    health = wait(degraded, what="health degraded by the failed archive")
    problem = health["retention"]["archive_problem"]
    assert str(archive) in problem and "No space left on device" in problem
    assert health["retention"]["archive_dir"] == str(archive)
    assert _failures(studio.client.get("/metrics").text) >= 1
    assert len(studio.db_rows("SELECT id FROM dispatch_outbox")) == 3  # nothing deleted
    assert list(archive.iterdir()) == []

    filler.unlink()  # space returns: the next pass archives, then deletes
    wait(lambda: not studio.db_rows("SELECT id FROM dispatch_outbox"), what="rows deleted")
    wait(
        lambda: studio.client.get("/api/health").json()["status"] == "ok",
        what="health ok again",
    )
    assert studio.client.get("/api/health").json()["retention"]["archive_problem"] is None
    (manifest,) = manifests_in(archive)
    assert verify_manifest(manifest) is None


def test_prune_on_a_read_only_archive_dir_deletes_nothing_and_says_why(
    serve: Any, make_settings: Callable[..., StudioSettings], small_tmpfs: Path
) -> None:
    settings = make_settings()
    db = Path(str(settings.db))
    db.parent.mkdir(parents=True, exist_ok=True)
    asyncio.run(_old_dispatches(db, 2))
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    studio = serve(settings.with_overrides(archive_dir=str(small_tmpfs)))
    answer = studio.client.post("/api/admin/maintenance", json={"action": "prune"})
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert (result["dispatches"], result["archives"], result["done"]) == (0, [], False)
    assert str(small_tmpfs) in result["archive_error"]
    assert "Read-only file system" in result["archive_error"]
    assert len(studio.db_rows("SELECT id FROM dispatch_outbox")) == 2
