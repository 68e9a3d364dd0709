"""Retention's archives: gzip'd JSON Lines files, each with a manifest beside it.

One file per retention batch, ``studio-<kind>-<UTC time>-<random>.jsonl.gz``; each line is one
row, ``{"kind": ..., "row": {...}}`` (``schedule_run``, ``invocation``, ``session``,
``status_transition``, ``run_log``, ``dispatch``). Its manifest, ``<same stem>.manifest.json``,
gives the format, the file's name, size and SHA-256, its line count, the count per kind and the
time range of the rows it holds (when their entities ended).

A file is written under a temporary name, fsynced, renamed into place and its directory
fsynced; then it is read back (from the disk where the OS lets us drop its cached pages),
decompressed, its lines counted per kind and hashed, and compared with what was written. Only
then is the manifest written (the same way), so a manifest names only a verified file.
Retention deletes nothing unless :func:`write_archive` returned.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import secrets
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

FORMAT = "studio-archive/1"
SUFFIX = ".jsonl.gz"
MANIFEST_SUFFIX = ".manifest.json"


class ArchiveError(Exception):
    """An archive could not be written or does not match its manifest (the message names the
    file or directory and the cause)."""


@dataclass(frozen=True)
class ArchiveLine:
    """One row to archive: its kind, its columns, and when its entity ended (``None``: not a
    row the time range counts)."""

    kind: str
    row: Mapping[str, Any]
    at: float | None = None


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _durable_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary name, fsync it, rename, fsync the dir."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def _read_back(path: Path) -> bytes:
    """The file's bytes, after asking the OS to drop its cached pages (so the read goes to
    the disk where it can)."""
    with open(path, "rb") as src:
        if hasattr(os, "posix_fadvise"):
            with contextlib.suppress(OSError):
                os.posix_fadvise(src.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        return src.read()


def _encode(lines: Iterable[ArchiveLine]) -> tuple[bytes, int, Counter[str], list[float]]:
    body = bytearray()
    counts: Counter[str] = Counter()
    times: list[float] = []
    n = 0
    for line in lines:
        body += json.dumps(
            {"kind": line.kind, "row": dict(line.row)},
            default=str,
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()
        body += b"\n"
        counts[line.kind] += 1
        if line.at is not None:
            times.append(float(line.at))
        n += 1
    # mtime=0: the same rows give the same bytes
    return gzip.compress(bytes(body), compresslevel=6, mtime=0), n, counts, times


def scan(data: bytes) -> tuple[int, Counter[str]]:
    """Decompress an archive's bytes and count its lines per kind (:class:`ArchiveError` when
    it does not decompress or a line is not an archive row)."""
    try:
        text = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise ArchiveError(f"does not decompress: {exc}") from None
    counts: Counter[str] = Counter()
    lines = text.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for number, raw in enumerate(lines, 1):
        try:
            record = json.loads(raw)
        except ValueError as exc:
            raise ArchiveError(f"line {number} is not JSON: {exc}") from None
        if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
            raise ArchiveError(f"line {number} has no kind")
        counts[record["kind"]] += 1
    return len(lines), counts


TimeRange = TypedDict("TimeRange", {"from": float, "until": float})
"""The earliest and latest time of the rows an archive holds."""


class Manifest(TypedDict):
    """An archive's manifest (the JSON file beside it), as :func:`write_archive` writes it."""

    format: str
    file: str
    kind: str
    bytes: int
    sha256: str
    lines: int
    counts: dict[str, int]
    time_range: TimeRange | None
    created_at: float


def write_archive(
    directory: str | Path, kind: str, lines: Iterable[ArchiveLine], *, now: float
) -> Manifest:
    """Write ``lines`` to a new verified archive in ``directory`` (created if missing) and its
    manifest beside it; return the manifest.

    Raises :class:`ArchiveError` naming the directory and the cause (unwritable, full, or the
    file read back differs from what was written); nothing of the attempt is left behind then.
    """
    folder = Path(directory)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    name = f"studio-{kind}-{stamp}-{secrets.token_hex(4)}{SUFFIX}"
    path = folder / name
    manifest_path = folder / (name.removesuffix(SUFFIX) + MANIFEST_SUFFIX)
    data, n, counts, times = _encode(lines)
    digest = hashlib.sha256(data).hexdigest()
    manifest: Manifest = {
        "format": FORMAT,
        "file": name,
        "kind": kind,
        "bytes": len(data),
        "sha256": digest,
        "lines": n,
        "counts": dict(sorted(counts.items())),
        "time_range": {"from": min(times), "until": max(times)} if times else None,
        "created_at": now,
    }
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _durable_write(path, data)
        back = _read_back(path)
        if hashlib.sha256(back).hexdigest() != digest:
            raise ArchiveError(f"{path}: read back with a different SHA-256")
        lines_back, counts_back = scan(back)
        if lines_back != n or counts_back != counts:
            raise ArchiveError(f"{path}: read back with other counts")
        _durable_write(manifest_path, json.dumps(manifest, indent=2).encode() + b"\n")
    except (OSError, ArchiveError) as exc:
        for leftover in (path, manifest_path):
            with contextlib.suppress(OSError):
                leftover.unlink()
        cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ArchiveError(f"archive to {folder} failed: {cause}") from exc
    return manifest


def verify_manifest(manifest_path: str | Path) -> str | None:
    """Check one manifest against its file (present, size, SHA-256, line count, counts per
    kind); return what is wrong (``None``: it matches)."""
    path = Path(manifest_path)
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"manifest unreadable: {exc}"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return f"manifest: format is not {FORMAT}"
    data_path = path.parent / str(manifest.get("file"))
    try:
        data = data_path.read_bytes()
    except OSError as exc:
        return f"{data_path.name}: {exc.strerror or exc}"
    if hashlib.sha256(data).hexdigest() != manifest.get("sha256"):
        return f"{data_path.name}: SHA-256 differs from the manifest's"
    if len(data) != manifest.get("bytes"):
        return f"{data_path.name}: {len(data)} bytes, the manifest says {manifest.get('bytes')}"
    try:
        n, counts = scan(data)
    except ArchiveError as exc:
        return f"{data_path.name}: {exc}"
    if n != manifest.get("lines") or dict(counts) != manifest.get("counts"):
        return f"{data_path.name}: its rows differ from the manifest's counts"
    return None


def manifests_in(directory: str | Path) -> list[Path]:
    """The manifests in ``directory``, by name."""
    return sorted(Path(directory).glob(f"*{MANIFEST_SUFFIX}"))


def read_archive(path: str | Path) -> Iterator[dict[str, Any]]:
    """The rows of one archive file, ``{"kind", "row"}`` each (:class:`ArchiveError` when it
    does not decompress or parse)."""
    try:
        text = gzip.decompress(Path(path).read_bytes())
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ArchiveError(f"{path}: does not decompress: {exc}") from None
    for number, raw in enumerate(text.splitlines(), 1):
        try:
            record = json.loads(raw)
        except ValueError as exc:
            raise ArchiveError(f"{path}: line {number} is not JSON: {exc}") from None
        if isinstance(record, dict):
            yield record
