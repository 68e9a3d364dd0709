"""Guards that the hatch test matrix installs exactly each package's sibling closure."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

FOLDERS = ["state", "launcher", "outbox", "scheduler-core", "studio-api", "cli"]


def _project(root: Path, folder: str) -> dict[str, object]:
    data = tomllib.loads((root / "packages" / folder / "pyproject.toml").read_text())
    project = data["project"]
    assert isinstance(project, dict)
    return project


def _sibling_deps(root: Path) -> dict[str, set[str]]:
    names = {str(_project(root, f)["name"]): f for f in FOLDERS}
    graph: dict[str, set[str]] = {}
    for folder in FOLDERS:
        deps = _project(root, folder).get("dependencies", [])
        assert isinstance(deps, list)
        siblings = set()
        for dep in deps:
            name = re.split(r"[<>=!~ \[;]", dep, maxsplit=1)[0]
            if name in names:
                assert re.search(r">=\s*\d", dep), f"{folder}: {dep!r} needs a minimum version"
                siblings.add(names[name])
        graph[folder] = siblings
    return graph


def _closure(graph: dict[str, set[str]], folder: str) -> set[str]:
    seen = {folder}
    stack = [folder]
    while stack:
        for dep in graph[stack.pop()]:
            if dep not in seen:
                seen.add(dep)
                stack.append(dep)
    return seen


def _members(root: Path) -> dict[str, set[str]]:
    hatch = tomllib.loads((root / "hatch.toml").read_text())
    env = hatch["envs"]["hatch-test"]
    assert env["installer"] == "pip"
    entries = env["matrix"][0]["package"]
    members: dict[str, set[str]] = {entry: set() for entry in entries}
    for rule in env["overrides"]["matrix"]["package"]["workspace"]["members"]:
        folder = rule["value"].removeprefix("packages/")
        for entry in rule["if"]:
            members[entry].add(folder)
    return members


# Suites beyond one package each, and the package whose sibling closure each installs: the
# dashboard drives the whole app (the CLI's closure is every package); the PostgreSQL suite
# tests every package on PostgreSQL, up to real `studio serve` nodes and the CLI.
EXTRA_SUITES = {"dashboard": "cli", "postgres": "cli"}


def test_matrix_has_every_package_and_all(repo_root: Path) -> None:
    entries = list(_members(repo_root))
    assert entries[: len(FOLDERS) + 1] == [*FOLDERS, "all"]
    assert set(entries[len(FOLDERS) + 1 :]) <= set(EXTRA_SUITES)


@pytest.mark.parametrize("suite", EXTRA_SUITES)
def test_extra_suites_install_their_packages_closure(repo_root: Path, suite: str) -> None:
    members = _members(repo_root)
    closure = _closure(_sibling_deps(repo_root), EXTRA_SUITES[suite])
    assert suite not in members or members[suite] == closure


@pytest.mark.parametrize("folder", FOLDERS)
def test_each_entry_installs_exactly_its_sibling_closure(repo_root: Path, folder: str) -> None:
    graph = _sibling_deps(repo_root)
    assert _members(repo_root)[folder] == _closure(graph, folder)


def test_all_entry_installs_everything(repo_root: Path) -> None:
    assert _members(repo_root)["all"] == set(FOLDERS)


def test_every_env_uses_pip(repo_root: Path) -> None:
    hatch = tomllib.loads((repo_root / "hatch.toml").read_text())
    for name, env in hatch["envs"].items():
        assert env.get("installer") == "pip", name


@pytest.mark.parametrize("folder", FOLDERS)
def test_package_layout(repo_root: Path, folder: str) -> None:
    base = repo_root / "packages" / folder
    project = _project(repo_root, folder)
    import_name = str(project["name"]).replace("-", "_")
    src = base / "src" / import_name
    for path in ["__init__.py", "__about__.py", "py.typed"]:
        assert (src / path).is_file(), src / path
    for path in ["README.md", "CHANGELOG.md", "tests"]:
        assert (base / path).exists(), base / path
    changelog = (base / "CHANGELOG.md").read_text()
    headings = [line for line in changelog.splitlines() if line.startswith("## ")]
    assert headings[:1] == ["## Unreleased"], f"{folder}: CHANGELOG must start with ## Unreleased"
    assert "__version__" in (src / "__about__.py").read_text()
