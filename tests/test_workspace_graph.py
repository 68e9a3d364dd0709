"""Guards that the hatch test matrix installs exactly each package's sibling closure."""

from __future__ import annotations

import ast
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


# -- one test matrix: scheduler-core's database tests on both backends ------------------------
def _entry_env_vars(hatch: dict[str, object], entry: str) -> dict[str, str]:
    env = hatch["envs"]["hatch-test"]  # type: ignore[index]
    rules = env["overrides"]["matrix"]["package"]["env-vars"]
    return {rule["key"]: rule["value"] for rule in rules if entry in rule["if"]}


def test_the_postgres_entry_runs_scheduler_cores_tests_on_postgresql(repo_root: Path) -> None:
    hatch = tomllib.loads((repo_root / "hatch.toml").read_text())
    overrides = hatch["envs"]["hatch-test"]["overrides"]
    paths = overrides["name"]["^postgres$"]["default-args"]["value"]
    assert paths == ["tests/postgres", "packages/scheduler-core/tests"]
    assert _entry_env_vars(hatch, "postgres")["STUDIO_TEST_DB_TARGET"] == "postgresql"
    # scheduler-core's conftest (db_target's params) must load: no conftest cut-off dir
    assert "--confcutdir" not in _entry_env_vars(hatch, "postgres").get("PYTEST_ADDOPTS", "")
    # the scheduler-core entry installs no psycopg and starts no cluster: its sqlite params only
    assert _entry_env_vars(hatch, "scheduler-core")["STUDIO_TEST_DB_TARGET"] == "sqlite"


def test_no_suite_copies_scheduler_cores_tests(repo_root: Path) -> None:
    copies = sorted(p.name for p in (repo_root / "tests").rglob("test_core_pg_*.py"))
    assert copies == [], "scheduler-core's tests run on PostgreSQL through db_target's params"


def test_every_sqlite_only_mark_gives_its_reason(repo_root: Path) -> None:
    marks = 0
    for path in sorted((repo_root / "packages" / "scheduler-core" / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.sqlite_only":
                marks += 1
                reason = node.args[0] if node.args else None
                assert isinstance(reason, ast.Constant) and isinstance(reason.value, str), path
                assert reason.value.strip(), (
                    f"{path.name}:{node.lineno}: sqlite_only needs a reason"
                )
    assert marks > 0
