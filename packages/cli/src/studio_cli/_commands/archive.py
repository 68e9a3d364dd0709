"""``studio archive …``: check and read the archives retention writes before it deletes
(``LIONAGI_STUDIO_ARCHIVE_DIR``). Works on the files alone: no database, no server."""

from __future__ import annotations

import json
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from .._errors import CliError
from .._output import emit_json, say
from ._common import json_option

# The archive format is scheduler-core's (it writes the files); the commands import it when they
# run (``studio --help`` imports no database module). These two names are its file suffixes.
SUFFIX = ".jsonl.gz"
MANIFEST_SUFFIX = ".manifest.json"

# the column that says when each kind of row's entity ended (the time range of a file)
_ENDED: dict[str, tuple[str, ...]] = {
    "schedule_run": ("ended_at", "created_at"),
    "dispatch": ("updated_at", "created_at"),
}


@click.group("archive")
def archive_group() -> None:
    """Check and read retention's archives (gzip'd JSON Lines files with a manifest each)."""


@archive_group.command("verify")
@click.argument("directory", type=click.Path(path_type=Path))
@json_option
def verify(directory: Path, as_json: bool) -> None:
    """Check every manifest in DIRECTORY against its file (SHA-256, size, line count and
    counts per kind); an archive file without a manifest is bad too.

    Exit 1 when any is bad, naming each on stderr (one line each).
    """
    from studio_scheduler_core._recovery.archive import manifests_in, verify_manifest

    folder = directory.expanduser()
    if not folder.is_dir():
        raise CliError(f"DIRECTORY: {folder} is not a directory")
    manifests = manifests_in(folder)
    bad: list[tuple[str, str]] = []
    for manifest in manifests:
        problem = verify_manifest(manifest)
        if problem is not None:
            bad.append((manifest.name, problem))
    covered = {m.name.removesuffix(MANIFEST_SUFFIX) + SUFFIX for m in manifests}
    for data in sorted(folder.glob(f"*{SUFFIX}")):
        if data.name not in covered:
            bad.append((data.name, "no manifest beside it"))
    good = len(manifests) - sum(1 for name, _ in bad if name.endswith(MANIFEST_SUFFIX))
    if as_json:
        emit_json(
            {
                "directory": str(folder),
                "manifests": len(manifests),
                "ok": good,
                "bad": [{"file": name, "problem": problem} for name, problem in bad],
            }
        )
    else:
        for name, problem in bad:
            sys.stderr.write(f"bad: {folder / name}: {problem}\n")
        say(f"{good} of {len(manifests)} archives verified in {folder}")
    if bad:
        sys.exit(1)


def _data_file(path: Path) -> tuple[Path, dict[str, Any] | None]:
    """The archive file ``path`` names (itself, or the file its manifest names) and its
    manifest when there is one."""
    if path.name.endswith(MANIFEST_SUFFIX):
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CliError(f"FILE: {path}: manifest unreadable: {exc}") from None
        return path.parent / str(manifest.get("file")), manifest
    beside = path.with_name(path.name.removesuffix(SUFFIX) + MANIFEST_SUFFIX)
    try:
        return path, json.loads(beside.read_text())
    except (OSError, ValueError):
        return path, None


def _iso(value: float | None) -> str | None:
    if value is None:
        return None
    return datetime.fromtimestamp(value, UTC).isoformat().replace("+00:00", "Z")


def _summary(path: Path, rows: list[dict[str, Any]], manifest: dict[str, Any] | None) -> Any:
    counts = Counter(str(r.get("kind")) for r in rows)
    times = []
    for record in rows:
        row = record.get("row") or {}
        columns = _ENDED.get(str(record.get("kind")))
        if columns is None and manifest is not None and manifest.get("kind") == "audit":
            columns = ("created_at",)
        for column in columns or ():
            if isinstance(row.get(column), int | float):
                times.append(float(row[column]))
                break
    return {
        "file": str(path),
        "kind": None if manifest is None else manifest.get("kind"),
        "lines": len(rows),
        "counts": dict(sorted(counts.items())),
        "time_range": ({"from": _iso(min(times)), "until": _iso(max(times))} if times else None),
        "sha256": None if manifest is None else manifest.get("sha256"),
        "manifest": manifest is not None,
    }


@archive_group.command("show")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--rows", "show_rows", is_flag=True, help="Print the rows, one JSON object a line.")
@click.option("--kind", default=None, help="With --rows: only rows of this kind.")
@json_option
def show(file: Path, show_rows: bool, kind: str | None, as_json: bool) -> None:
    """Print what an archive FILE holds (the .jsonl.gz file or its manifest): counts per
    kind and the time range its entities ended in; --json as one document, --rows the rows.
    """
    from studio_scheduler_core._recovery.archive import ArchiveError, read_archive

    path, manifest = _data_file(file.expanduser())
    try:
        rows = list(read_archive(path))
    except OSError as exc:
        raise CliError(f"FILE: {path}: {exc.strerror or exc}") from None
    except ArchiveError as exc:
        raise CliError(f"FILE: {exc}") from None
    if show_rows:
        for record in rows:
            if kind is None or record.get("kind") == kind:
                sys.stdout.write(json.dumps(record, separators=(",", ":")) + "\n")
        return
    summary = _summary(path, rows, manifest)
    if as_json:
        emit_json(summary)
        return
    say(
        f"{path.name}: {summary['lines']} rows"
        + (f" ({summary['kind']})" if summary["kind"] else "")
    )
    for name, count in summary["counts"].items():
        say(f"  {name}: {count}")
    span = summary["time_range"]
    say(f"  ended: {span['from']} .. {span['until']}" if span else "  ended: -")
    if manifest is None:
        say("  no manifest beside it")
