"""How long `studio --help` takes, wall clock, in a fresh process each time.

Usage: python bench/cli_startup.py [--runs N]

Runs the installed `studio` console script (beside this interpreter, else on PATH, else
`python -m studio_cli`) N times (default 9, at least 5) after one warm-up, and prints the
median and the min-max range. For scale it also times a bare interpreter start and, when the
reference `li` (lionagi 0.36.0, the bench env) is installed, `li --help`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _script(name: str) -> str | None:
    beside = shutil.which(name, path=str(Path(sys.executable).parent))
    return beside or shutil.which(name)


def measure(argv: list[str], runs: int) -> list[float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIONAGI_")}
    subprocess.run(argv, capture_output=True, env=env, check=False)  # warm the page cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, env=env, check=False)
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode()}")
    return times


def report(label: str, times: list[float]) -> None:
    ms = [t * 1000 for t in times]
    print(
        f"{label:<28} median {statistics.median(ms):7.1f} ms   "
        f"min-max {min(ms):6.1f}-{max(ms):6.1f} ms   ({len(ms)} runs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    runs = max(5, args.runs)
    studio = _script("studio")
    command = [studio, "--help"] if studio else [sys.executable, "-m", "studio_cli", "--help"]
    report("python -c pass", measure([sys.executable, "-c", "pass"], runs))
    report("studio --help", measure(command, runs))
    report(
        "studio schedule create --help",
        measure([*command[:-1], "schedule", "create", "--help"], runs),
    )
    li = _script("li")
    if li:
        report("reference: li --help", measure([li, "--help"], runs))


if __name__ == "__main__":
    main()
