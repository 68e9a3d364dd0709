"""bench/tokens.py still runs against the packages as they are (once, tiny; not for figures)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def test_tokens_bench_compares_scoped_and_admin_requests(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "tokens.py"), "--rounds", "2", "--requests", "5"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "scoped / admin:" in done.stdout and "target: ≤ 1.1×" in done.stdout
