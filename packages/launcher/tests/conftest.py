"""Fixtures for studio-launcher's tests: real child processes and a fake `li`.

The helpers (waiting, /proc checks, cleanup) are imported from :mod:`studio_launcher.testing`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from studio_launcher.testing import clean_environment, fake_li  # noqa: F401  (fixtures)


@pytest.fixture
def prefix(fake_li: Path) -> list[str]:
    return [str(fake_li)]


@pytest.fixture
def private_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the stdlib's temp directory at an empty folder so created files can be counted."""
    import tempfile

    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder
