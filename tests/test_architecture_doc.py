"""docs/architecture.md's package arrows and table are the real imports and dependencies.

The section "Packages and their arrows" draws one arrow per direct import between packages (a
mermaid flowchart) and lists, per package, the Studio packages it imports, its third-party
dependencies and its extras. Each is checked against the source (every ``import studio_x`` /
``from studio_x …`` under ``packages/<folder>/src``) and the ``pyproject.toml`` files, so a new
import, a dropped dependency or a new extra fails here until the document says it.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

LEAF = "— (a leaf)"
NONE = "—"
SECTION = "## Packages and their arrows"


def _packages(root: Path) -> dict[str, dict[str, object]]:
    """folder → its pyproject's ``[project]`` table."""
    found: dict[str, dict[str, object]] = {}
    for pyproject in sorted((root / "packages").glob("*/pyproject.toml")):
        found[pyproject.parent.name] = tomllib.loads(pyproject.read_text())["project"]
    return found


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised (no extras, version or marker)."""
    return re.split(r"[<>=!~ \[;]", requirement.strip(), maxsplit=1)[0].lower()


def _folders_by_distribution(root: Path) -> dict[str, str]:
    return {str(project["name"]): folder for folder, project in _packages(root).items()}


def real_imports(root: Path) -> dict[str, set[str]]:
    """folder → the folders of the other Studio packages its ``src`` imports."""
    by_module = {
        distribution.replace("-", "_"): folder
        for distribution, folder in _folders_by_distribution(root).items()
    }
    graph: dict[str, set[str]] = {}
    for folder in _packages(root):
        targets: set[str] = set()
        for path in (root / "packages" / folder / "src").rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                targets.update(
                    by_module[m.split(".")[0]] for m in modules if m.split(".")[0] in by_module
                )
        targets.discard(folder)
        graph[folder] = targets
    return graph


def declared(root: Path) -> dict[str, tuple[set[str], set[str], dict[str, set[str]]]]:
    """folder → (Studio folders it depends on, third-party names, extra → names)."""
    folders = _folders_by_distribution(root)
    result: dict[str, tuple[set[str], set[str], dict[str, set[str]]]] = {}
    for folder, project in _packages(root).items():
        requirements = project.get("dependencies", [])
        extras = project.get("optional-dependencies", {})
        assert isinstance(requirements, list) and isinstance(extras, dict)
        dependencies = [_name(r) for r in requirements]
        result[folder] = (
            {folders[d] for d in dependencies if d in folders},
            {d for d in dependencies if d not in folders},
            {extra: {_name(r) for r in reqs} for extra, reqs in extras.items()},
        )
    return result


def section(doc: str) -> str:
    """The text of "Packages and their arrows", up to the next heading."""
    start = doc.index(SECTION) + len(SECTION)
    end = re.search(r"^#{1,3} ", doc[start:], re.M)
    return doc[start : start + end.start()] if end else doc[start:]


def documented_arrows(text: str, root: Path) -> set[tuple[str, str]]:
    """The mermaid flowchart's arrows, as (importer folder, imported folder)."""
    block = re.search(r"```mermaid\n(.*?)```", text, re.S)
    assert block, "the section has no mermaid flowchart"
    folders = _folders_by_distribution(root)
    nodes = {
        node: folders[distribution]
        for node, distribution in re.findall(r'^\s*(\w+)\["(studio-[\w-]+)', block[1], re.M)
    }
    assert sorted(nodes.values()) == sorted(folders.values()), "one node per package"
    return {(nodes[a], nodes[b]) for a, b in re.findall(r"^\s*(\w+)\s*-->\s*(\w+)", block[1], re.M)}


def documented_table(text: str) -> dict[str, tuple[set[str], set[str], dict[str, set[str]]]]:
    """folder → (Studio folders, third-party names, extra → names) from the package table."""
    rows: dict[str, tuple[set[str], set[str], dict[str, set[str]]]] = {}
    for line in text.splitlines():
        match = re.match(r"\|\s*`packages/([\w-]+)`\s*\|", line)
        if not match:
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 5, f"folder, distribution, imports, third-party, extras: {line}"
        _, _, studio, third_party, extras = cells
        assert match[1] not in rows, f"{match[1]} is listed twice"
        rows[match[1]] = (
            _names(studio, leaf=True),
            _names(third_party.split("(")[0]),
            {extra: _names(names) for extra, names in re.findall(r"`([\w-]+)`:\s*([^;]+)", extras)},
        )
    return rows


def _names(cell: str, *, leaf: bool = False) -> set[str]:
    if cell.strip() in ((LEAF,) if leaf else ()) or cell.strip() in ("", NONE):
        return set()
    return {_name(name) for name in cell.split(",") if name.strip()}


def _edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in graph.items() for b in targets}


@pytest.fixture
def doc_section(repo_root: Path) -> str:
    return section((repo_root / "docs" / "architecture.md").read_text())


def test_the_arrows_are_the_imports_between_packages(repo_root: Path, doc_section: str) -> None:
    real = _edges(real_imports(repo_root))
    drawn = documented_arrows(doc_section, repo_root)
    assert drawn == real, (
        f"arrows drawn but not imported: {sorted(drawn - real)}; "
        f"imports with no arrow: {sorted(real - drawn)}"
    )


def test_nothing_points_back_up(repo_root: Path) -> None:
    graph = real_imports(repo_root)
    done: list[str] = []
    while len(done) < len(graph):
        ready = [f for f in graph if f not in done and graph[f] <= set(done)]
        assert ready, f"an import cycle among {sorted(set(graph) - set(done))}"
        done += ready


def test_the_table_lists_what_each_package_imports(repo_root: Path, doc_section: str) -> None:
    table = documented_table(doc_section)
    real = real_imports(repo_root)
    assert sorted(table) == sorted(real), "one row per package folder"
    assert {f: row[0] for f, row in table.items()} == real


def test_each_package_declares_the_packages_it_imports(repo_root: Path) -> None:
    real = real_imports(repo_root)
    assert {f: deps[0] for f, deps in declared(repo_root).items()} == real


def test_the_table_lists_third_party_dependencies_and_extras(
    repo_root: Path, doc_section: str
) -> None:
    table = documented_table(doc_section)
    for folder, (_, third_party, extras) in declared(repo_root).items():
        assert table[folder][1] == third_party, f"{folder}: third-party dependencies"
        assert table[folder][2] == extras, f"{folder}: extras"
