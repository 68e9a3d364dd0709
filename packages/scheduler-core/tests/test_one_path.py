"""One path for one job: the checks read scheduler-core's source (ast), because what they
guard is where code lives, not what it does (the behaviour is the other suites').

- one builder of the ``invocations`` row (``_fire/commit.py``'s ``invocation_row``);
- due retries and buffered occurrences start through the fire pipeline (``fire_waiting``),
  and nothing else runs a waiting row's commit;
- only the terminal module writes an ``UPDATE`` that sets a run's or an invocation's status
  (a waiting row's non-terminal start is one ``studio_state.transition``);
- a sync/async pair is one implementation (the sync one) and a facade that runs it in one
  trip (``run_sync``);
- the engine does not ask which worker it has: it calls only what ``WorkerPass`` declares,
  and the ad-hoc worker implements all of it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import studio_scheduler_core
from studio_scheduler_core import AdhocWorker, SchedulerSettings
from studio_scheduler_core.abc import WorkerPass

PACKAGE = Path(studio_scheduler_core.__file__).resolve().parent
TERMINAL = "_records/terminal.py"


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text())


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """(qualified name, node) of every function, methods as ``Class.name``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{node.name}", node
            yield from _functions(node, f"{prefix}{node.name}.")


def _function(module: str, name: str) -> ast.AST:
    tree = ast.parse((PACKAGE / module).read_text())
    found = dict(_functions(tree))
    assert name in found, f"{module} has no function {name}"
    return found[name]


def _called(node: ast.AST) -> set[str]:
    """The names a function calls (``f(...)`` and ``x.f(...)`` both give ``f``)."""
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            if isinstance(call.func, ast.Name):
                names.add(call.func.id)
            elif isinstance(call.func, ast.Attribute):
                names.add(call.func.attr)
    return names


def _sql_text(node: ast.AST) -> str | None:
    """A string constant, or an f-string with ``{}`` for each interpolated part."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
            for v in node.values
        )
    return None


def test_one_function_builds_the_invocation_row() -> None:
    """An invocation's row (a dict, or a ``NewInvocation``, with its ``schedule_run_id`` and
    ``skill``) is built in one place: a fire's commit, a waiting row's start and a worker's
    claim all call it."""
    builders = []
    for module, tree in _modules():
        for name, function in _functions(tree):
            for node in ast.walk(function):
                if isinstance(node, ast.Dict):
                    keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                elif isinstance(node, ast.Call):  # a record built from keywords
                    keys = {k.arg for k in node.keywords}
                else:
                    continue
                if {"schedule_run_id", "skill"} <= keys:
                    builders.append(f"{module}:{name}")
    assert sorted(set(builders)) == ["_fire/commit.py:invocation_row"]
    for module, function in (
        ("_fire/commit.py", "fire_write"),
        ("_fire/waiting.py", "_commit_waiting"),
        ("_adhoc/claim.py", "commit_claim"),
    ):
        assert "invocation_row" in _called(_function(module, function)), (module, function)


def test_retries_and_buffered_occurrences_start_through_the_fire_pipeline() -> None:
    """``fire_due_retries`` and ``_start_one`` hand their row to the pipeline: neither
    prepares, commits, releases or reports the fire by hand."""
    by_hand = {
        "prepare",
        "prepare_row",
        "commit_waiting",
        "start_waiting_run",
        "insert_invocation",
        "release",
        "fire_event",
    }
    for module, function in (
        ("_policies/retry_fire.py", "fire_due_retries"),
        ("_policies/overlap.py", "OverlapPolicies._start_one"),
    ):
        called = _called(_function(module, function))
        assert "fire_waiting" in called, (module, function)
        assert not called & by_hand, (module, function, sorted(called & by_hand))
    callers = sorted(
        module
        for module, tree in _modules()
        for _, function in _functions(tree)
        if "commit_waiting" in _called(function)
    )
    assert set(callers) == {"_fire/pipeline.py"}, callers


UPDATE = re.compile(r"UPDATE\s+(\S+)\s+SET\s+(.*?)(?:\s+WHERE\s|$)", re.IGNORECASE | re.DOTALL)


def test_only_the_terminal_module_updates_a_run_or_invocation_status() -> None:
    """Outside ``_records/terminal.py`` no SQL ``UPDATE`` of ``schedule_runs`` or
    ``invocations`` (or of a table named at run time) sets ``status``, nor builds its SET
    list at run time (which could)."""
    found = []
    for module, tree in _modules():
        if module == TERMINAL:
            continue
        for node in ast.walk(tree):
            text = _sql_text(node)
            match = None if text is None else UPDATE.search(text)
            if match is None:
                continue
            table, assignments = match.group(1), match.group(2)
            if table not in ("schedule_runs", "invocations", "{}"):
                continue
            if "{}" in assignments or re.search(r"\bstatus\s*=", assignments):
                found.append(f"{module}:{node.lineno}: {text[:70]}")
    assert found == []


def test_a_sync_and_async_pair_is_one_implementation_and_a_facade() -> None:
    """Where scheduler-core has ``f`` and ``f_sync``, ``f`` runs ``f_sync`` in one trip
    (``run_sync``, or ``run_write_transaction`` when it owns its transaction) and executes no
    statement of its own."""
    pairs = []
    for module, tree in _modules():
        functions = dict(_functions(tree))
        for name, function in functions.items():
            twin = functions.get(f"{name}_sync")
            if twin is None or not isinstance(function, ast.AsyncFunctionDef):
                continue
            pairs.append(f"{module}:{name}")
            called = _called(function)
            trip = {"run_sync", "run_write_transaction"}  # the latter: its own transaction
            assert f"{name}_sync" in called and called & trip, f"{module}:{name}"
            assert not called & {"execute", "executemany", "execute_fetchall"}, f"{module}:{name}"
    assert "_records/terminal.py:apply" in pairs


def test_the_engine_calls_only_what_the_worker_pass_declares() -> None:
    """No ``isinstance(…, AdhocWorker)`` in the engine, and every member of its worker it
    touches is declared on :class:`WorkerPass`."""
    declared = {
        name
        for name, value in vars(WorkerPass).items()
        if callable(value) and not name.startswith("_")
    }
    asks, touches = [], set()
    for module, tree in _modules():
        if not module.startswith("_engine/"):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and "AdhocWorker" in ast.unparse(node.args[1])
            ):
                asks.append(f"{module}:{node.lineno}")
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "_worker"
            ):
                touches.add(node.attr)
    assert asks == []
    assert touches <= declared, sorted(touches - declared)


def test_the_ad_hoc_worker_implements_every_member_of_the_worker_pass(tmp_path: Path) -> None:
    worker = AdhocWorker(settings=SchedulerSettings(), db_path=str(tmp_path / "s.db"))
    assert isinstance(worker, WorkerPass)
    declared = {
        name
        for name, value in vars(WorkerPass).items()
        if callable(value) and not name.startswith("_")
    }
    assert {"run", "stop", "in_flight", "attach", "revoke"} <= declared
    assert all(callable(getattr(worker, name)) for name in declared)
