"""bench/schedule_sets.py still runs against the packages as they are (once, tiny; not for
figures), with a YAML and a JSON body."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("form", ["yaml", "json"])
def test_schedule_sets_bench_applies_and_re_applies(tmp_path: Path, form: str) -> None:
    argv = [sys.executable, str(ROOT / "bench" / "schedule_sets.py"), "--rounds", "1"]
    done = subprocess.run(
        [*argv, "--members", "20", "--format", form],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{form} body" in done.stdout and "POSTs / apply:" in done.stdout
    assert "re-apply (writes nothing):" in done.stdout
