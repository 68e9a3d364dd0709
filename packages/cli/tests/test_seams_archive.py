"""``studio archive verify DIR`` and ``studio archive show FILE`` on archives a real retention
pass wrote: a good directory verifies (exit 0); one flipped byte fails it (exit 1, the bad file
named on one line); ``show`` says what a file holds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from conftest import Studio

from studio_cli._commands import archive as archive_command
from studio_outbox import deliver_due_dispatches, enqueue_dispatch
from studio_scheduler_core._recovery import archive as archive_format
from studio_scheduler_core._recovery.retention import retention_pass
from studio_scheduler_core.testing import T0
from studio_state import ManualClock, connect

DAY = 86400.0


async def _archive(db: Path, archive: Path, runs_dir: Path) -> list[str]:
    """Three dispatches delivered at T0, then a retention pass that archives and deletes
    them; the manifests it wrote."""
    clock = ManualClock(T0)
    async with connect(db) as conn:
        for i in range(3):
            await enqueue_dispatch(conn, kind="k", deliver_to=f"to-{i}", clock=clock)
        await deliver_due_dispatches(conn, notify_template=["true"], clock=clock)
        report = await retention_pass(
            conn,
            now=T0 + 10 * DAY,
            retention_days=30,
            dispatch_retention_days=7,
            runs_dir=runs_dir,
            archive_dir=archive,
        )
    assert report.dispatches == 3 and report.archive_error is None
    return report.archives


def test_verify_passes_a_good_dir_and_names_a_flipped_byte(studio: Studio, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    (manifest_name,) = asyncio.run(_archive(studio.db, archive, tmp_path / "runs"))
    manifest = json.loads((archive / manifest_name).read_text())
    data = archive / manifest["file"]

    good = studio.run("archive", "verify", str(archive))
    assert good.stdout.strip() == f"1 of 1 archives verified in {archive}"
    assert studio.ok_json("archive", "verify", str(archive))["bad"] == []

    shown = studio.ok_json("archive", "show", str(data))
    assert shown["counts"] == {
        "dispatch": 3,
        "status_transition": manifest["counts"]["status_transition"],
    }
    assert shown["kind"] == "dispatches" and shown["manifest"] is True
    assert shown["time_range"]["from"].startswith("2023-11-14")
    text = studio.run("archive", "show", str(archive / manifest_name)).stdout
    assert "dispatch: 3" in text and "ended: 2023-11-14" in text
    rows = studio.run("archive", "show", str(data), "--rows", "--kind", "dispatch").stdout
    assert sorted(json.loads(line)["row"]["deliver_to"] for line in rows.splitlines()) == [
        "to-0",
        "to-1",
        "to-2",
    ]

    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    data.write_bytes(bytes(raw))
    bad = studio.run("archive", "verify", str(archive), expect=1)
    lines = bad.stderr.strip().splitlines()
    assert lines == [
        f"bad: {archive / manifest_name}: {data.name}: SHA-256 differs from the manifest's"
    ]
    assert "0 of 1 archives verified" in bad.stdout


def test_the_command_names_the_files_as_the_writer_does() -> None:
    assert (archive_command.SUFFIX, archive_command.MANIFEST_SUFFIX) == (
        archive_format.SUFFIX,
        archive_format.MANIFEST_SUFFIX,
    )


def test_verify_names_a_file_without_manifest_and_refuses_a_missing_dir(
    studio: Studio, tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    (manifest_name,) = asyncio.run(_archive(studio.db, archive, tmp_path / "runs"))
    (archive / manifest_name).unlink()
    bad = studio.run("archive", "verify", str(archive), expect=1)
    assert "no manifest beside it" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    missing = studio.fail("archive", "verify", str(tmp_path / "nowhere"))
    assert "DIRECTORY" in missing.error_line
    not_gzip = tmp_path / "x.jsonl.gz"
    not_gzip.write_bytes(b"plain")
    assert "FILE" in studio.fail("archive", "show", str(not_gzip)).error_line
