"""The package's shape, read from its source files: a top level that reads at a glance, modules
small enough to read whole, imports that only run down the layers, and no module reading
another object's private members.

No database: these tests read the source tree (they run with the ``sqlite`` selection).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import studio_scheduler_core

PACKAGE = Path(studio_scheduler_core.__file__).resolve().parent

# The top level's entries, lowest first: a module imports only from its own entry or from
# entries before it. The first four are the base every layer may use; ``__init__`` (the
# public facade) is above all of them and imported by none.
LAYERS: tuple[str, ...] = (
    "__about__",
    "_exceptions",
    "_settings",
    "_records",  # the records, their row codec, the one guarded status write
    "abc",  # the seams' protocols: they take and return the records
    "_schema",  # migrations, SQLite and PostgreSQL side by side
    "_triggers",  # cron/interval/threshold cadence and the trigger registry
    "_notify",  # notification validation and the enqueue beside an outcome
    "_observe",  # operator events and the reads behind the views
    "_admission",  # the gates, run counts, usage evidence and spend
    "_schedules",  # schedule validation, the schedule service and its store
    "_fire",  # one fire: reserve, prepare, commit, execute, finish; child env and run logs
    "_policies",  # overlap and retry policies on top of the fire pipeline
    "_recovery",  # start-up reconcile, orphans, retention, the reapers
    "_adhoc",  # the ad-hoc queue, its leases and worker
    "_github",  # the github_poll trigger source
    "_engine",  # the loop that drives every concern
    "testing",
)
NOT_COUNTED = frozenset({"__init__.py", "__about__.py", "py.typed"})
MAX_TOP_LEVEL = 17
MAX_LINES = 400
MAX_ENGINE_LINES = 300
# namedtuple's public API is spelled with a leading underscore
PUBLIC_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})


def _top_level_entries(root: Path) -> list[str]:
    return sorted(
        p.name
        for p in root.iterdir()
        if p.name not in NOT_COUNTED
        and (p.suffix == ".py" or p.name == "py.typed" or (p / "__init__.py").exists())
    )


def _modules(root: Path) -> Iterator[Path]:
    yield from sorted(root.rglob("*.py"))


def _entry(root: Path, path: Path) -> str:
    first = path.relative_to(root).parts[0]
    return first.removesuffix(".py")


def _imported_entries(root: Path, path: Path) -> Iterator[tuple[int, str]]:
    """(line, top-level entry) for each package-internal import of ``path``."""
    package = [root.name, *path.relative_to(root).parts[:-1]]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names if a.name.startswith(root.name + ".")]
            for parts in names:
                yield node.lineno, parts[1]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == root.name:
                target = node.module.split(".")
            else:
                continue
            if len(target) >= 2:
                yield node.lineno, target[1]
            else:  # ``from .. import x``: x is an entry of the top level, or the facade's
                for alias in node.names:
                    name = alias.name
                    is_entry = (root / f"{name}.py").exists() or (root / name).is_dir()
                    yield node.lineno, name if is_entry else "__init__"


def upward_imports(root: Path) -> list[str]:
    """Imports that run from an entry to one at its own level or above (or to the facade)."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    found = []
    for path in _modules(root):
        source = _entry(root, path)
        if source == "__init__":
            continue
        for line, target in _imported_entries(root, path):
            if target == source:
                continue
            if target not in rank or source not in rank or rank[target] > rank[source]:
                found.append(f"{path.relative_to(root)}:{line} imports {target}")
    return found


def private_reach_ins(root: Path) -> list[str]:
    """``x._name`` where ``x`` is not ``self``/``cls``: a module reading another object's (or
    another module's) private member."""
    found = []
    for path in _modules(root):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            name = node.attr
            if not name.startswith("_") or name.startswith("__") or name in PUBLIC_UNDERSCORED:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_top_level_holds_at_most_17_modules_and_subpackages() -> None:
    entries = _top_level_entries(PACKAGE)
    assert len(entries) <= MAX_TOP_LEVEL, entries


def test_every_top_level_entry_has_a_place_in_the_layers() -> None:
    entries = {e.removesuffix(".py") for e in _top_level_entries(PACKAGE)}
    assert entries <= set(LAYERS), sorted(entries - set(LAYERS))


def test_no_module_is_over_400_lines_and_the_engine_is_at_most_300() -> None:
    sizes = {
        p.relative_to(PACKAGE).as_posix(): len(p.read_text().splitlines())
        for p in _modules(PACKAGE)
    }
    assert {m: n for m, n in sizes.items() if n > MAX_LINES} == {}
    assert sizes["_engine/engine.py"] <= MAX_ENGINE_LINES


def test_imports_only_run_down_the_layers() -> None:
    assert upward_imports(PACKAGE) == []


def test_no_module_reads_another_objects_private_members() -> None:
    assert private_reach_ins(PACKAGE) == []


def test_the_checks_see_an_upward_import_and_a_reach_in(tmp_path: Path) -> None:
    root = tmp_path / PACKAGE.name
    for entry in ("_records", "_engine"):
        (root / entry).mkdir(parents=True)
        (root / entry / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "_records" / "codec.py").write_text(
        "from .._engine.missed import due\n\ndef f(evaluator):\n    return evaluator._due\n"
    )
    (root / "_engine" / "missed.py").write_text(
        "from .._records.codec import f\nfrom .. import _records\n\ndef due(self):\n"
        "    return self._x, f(self).parts._replace()\n"
    )
    assert upward_imports(root) == ["_records/codec.py:1 imports _engine"]
    assert private_reach_ins(root) == ["_records/codec.py:4: evaluator._due"]
