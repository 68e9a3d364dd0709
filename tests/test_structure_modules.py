"""Every package's modules stay short enough to read at a glance: at most 400 lines each.

A module that outgrows it is split along a seam (one concept per module), not squeezed.
"""

from __future__ import annotations

from pathlib import Path

MAX_LINES = 400
ROOT = Path(__file__).resolve().parent.parent


def long_modules(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """The modules under ``root/packages/*/src`` longer than ``limit`` lines: path -> lines."""
    sizes = {
        path.relative_to(root).as_posix(): len(path.read_text().splitlines())
        for path in sorted(root.glob("packages/*/src/**/*.py"))
    }
    return {name: lines for name, lines in sizes.items() if lines > limit}


def test_no_module_in_any_package_is_over_400_lines() -> None:
    modules = list(ROOT.glob("packages/*/src/**/*.py"))
    assert len(modules) > 100, "the glob found too few modules to be checking the packages"
    offenders = long_modules(ROOT)
    assert offenders == {}, "over 400 lines (split each along a seam): " + ", ".join(
        f"{name} ({lines})" for name, lines in offenders.items()
    )


def test_the_check_names_a_module_one_line_over(tmp_path: Path) -> None:
    src = tmp_path / "packages" / "demo" / "src" / "demo"
    src.mkdir(parents=True)
    (src / "short.py").write_text("x = 1\n" * MAX_LINES)
    (src / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert long_modules(tmp_path) == {"packages/demo/src/demo/long.py": MAX_LINES + 1}
