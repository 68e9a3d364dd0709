"""Reading a ``ScheduleSet`` document: bounded size, YAML without surprises.

The loader is PyYAML's safe loader with YAML 1.2's core scalars: only ``true``/``false`` are
booleans (``on``, ``off``, ``yes``, ``no`` stay strings: ``notify.on`` is a key), timestamps stay
the text they were written as, integers are decimal, and a key written twice or an alias is an
error.

Two loaders share those rules: :class:`FastSetLoader` (libyaml's parser, when PyYAML was built
with it) reads a document several times faster than :class:`SetLoader` (pure Python). A text
the fast loader refuses is read again by :class:`SetLoader`, so that every error is reported
as the pure-Python loader words and places it. Either way the member count is checked on the
composed nodes, before a single value is constructed or validated.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..._exceptions import SchedulerError

MAX_DOCUMENT_BYTES = 10 * 1024 * 1024
"""A document of this size or more is refused before it is parsed."""
MAX_MEMBERS = 10_000
"""A document with more members is refused before its members are constructed or checked."""


class ScheduleSetUnreadable(SchedulerError):
    """A schedule-set document cannot be read: missing, too large, not UTF-8, malformed YAML,
    or not a single mapping. ``.source`` names it; ``.line``/``.column`` (1-based) point into
    it when the parser said where."""

    def __init__(
        self,
        source: str,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        path: str = "",
    ) -> None:
        self.source = source
        self.message = message
        self.line = line
        self.column = column
        self.path = path
        where = source if line is None else f"{source}:{line}:{column}"
        if path:
            where = f"{where}: {path}"
        super().__init__(f"{where}: {message}")


def too_many_members(source: str, count: int) -> ScheduleSetUnreadable:
    """The refusal of a document holding ``count`` (more than :data:`MAX_MEMBERS`) members."""
    return ScheduleSetUnreadable(
        source,
        f"holds {count} members; a document holds at most {MAX_MEMBERS}",
        path="schedules",
    )


class _DistinctKeys(SafeConstructor):
    """The safe constructor, refusing a key written twice in one mapping."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        """A mapping whose keys are all distinct (PyYAML keeps the last silently)."""
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) or key is None:
                if key in seen:
                    raise ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


class SetLoader(_DistinctKeys, yaml.SafeLoader):
    """The safe loader with YAML 1.2 core scalars; duplicate keys and aliases refused."""

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        """A node; an alias (``*name``) is refused: a few of them can stand for gigabytes."""
        if self.check_event(AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in the stubs
            raise ComposerError(None, None, "aliases (*name) are not accepted", event.start_mark)
        return super().compose_node(parent, index)


def _keep(resolvers: dict[Any, Any]) -> dict[Any, Any]:
    dropped = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:timestamp"}
    return {
        first: [(tag, regexp) for tag, regexp in entries if tag not in dropped]
        for first, entries in resolvers.items()
    }


SetLoader.yaml_implicit_resolvers = _keep(yaml.SafeLoader.yaml_implicit_resolvers)
SetLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
SetLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789")
)

_CSafeLoader: type[Any] | None = getattr(yaml, "CSafeLoader", None)
FastSetLoader: type[Any] | None = None
""":class:`SetLoader`'s rules on libyaml's parser (``None`` without libyaml). Its composer is
libyaml's, which takes aliases, so a document that may hold one (an ``&anchor``) has its nodes
checked for sharing before anything is constructed."""
if _CSafeLoader is not None:
    FastSetLoader = type("FastSetLoader", (_DistinctKeys, _CSafeLoader), {})
    # the same scalar rules: the resolver is Python code both loaders call per scalar
    FastSetLoader.yaml_implicit_resolvers = SetLoader.yaml_implicit_resolvers


class _Refused(Exception):
    """The fast loader met something it leaves to :class:`SetLoader` to report."""


def _shares_nodes(root: Node) -> bool:
    """Whether a node is reached twice under ``root``: an alias was composed."""
    seen: set[int] = set()
    stack: list[Node] = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            return True
        seen.add(id(node))
        if isinstance(node, MappingNode):
            for key, value in node.value:
                stack.append(key)
                stack.append(value)
        elif isinstance(node, SequenceNode):
            stack.extend(node.value)
    return False


def _member_count(root: Node) -> int | None:
    """How many members the composed document's ``schedules`` mapping holds, if it is one."""
    if not isinstance(root, MappingNode):
        return None
    for key, value in root.value:
        if (
            isinstance(key, ScalarNode)
            and key.value == "schedules"
            and isinstance(value, MappingNode)
        ):
            return len(value.value)
    return None


def _load(loader_class: type[Any], text: str, source: str) -> object:
    """The one document in ``text``, its member count checked on the composed nodes."""
    loader = loader_class(text)
    try:
        nodes = []
        while loader.check_node():
            nodes.append(loader.get_node())
        if len(nodes) != 1:
            raise ScheduleSetUnreadable(source, f"must hold one document, found {len(nodes)}")
        root = nodes[0]
        if loader_class is not SetLoader and "&" in text and _shares_nodes(root):
            raise _Refused  # an alias: SetLoader says where
        count = _member_count(root)
        if count is not None and count > MAX_MEMBERS:
            raise too_many_members(source, count)
        return loader.construct_document(root)
    finally:
        loader.dispose()


def parse_document(text: str, source: str) -> Mapping[object, object]:
    """The document in ``text`` (``source`` names it in errors) as a mapping: the values as
    parsed (JSON-shaped, not checked yet; :func:`.document.walk` checks them).

    Raises :class:`ScheduleSetUnreadable` for malformed YAML (with its line and column), more
    than one document, or a top level that is not a mapping.
    """
    if text.lstrip().startswith("{"):
        return _parse_json(text, source)
    if FastSetLoader is not None:
        with contextlib.suppress(yaml.YAMLError, _Refused):
            return _mapping(_load(FastSetLoader, text, source), source)
    try:
        document = _load(SetLoader, text, source)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "malformed YAML"
        if mark is None:
            raise ScheduleSetUnreadable(source, f"malformed YAML: {problem}") from None
        raise ScheduleSetUnreadable(
            source, f"malformed YAML: {problem}", line=mark.line + 1, column=mark.column + 1
        ) from None
    except yaml.YAMLError as exc:
        raise ScheduleSetUnreadable(source, f"malformed YAML: {exc}") from None
    return _mapping(document, source)


def _mapping(document: object, source: str) -> Mapping[object, object]:
    if not isinstance(document, dict):
        raise ScheduleSetUnreadable(
            source, f"must be a mapping (apiVersion, kind, ...), got {type(document).__name__}"
        )
    return document


def _unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a schedule accepts")


def _parse_json(text: str, source: str) -> Mapping[object, object]:
    """A document written as JSON (a subset of YAML, read the same way, several times faster
    than the YAML parser); errors as the YAML path reports them."""
    try:
        document = json.loads(text, object_pairs_hook=_unique, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ScheduleSetUnreadable(
            source, f"malformed JSON: {exc.msg}", line=exc.lineno, column=exc.colno
        ) from None
    except ValueError as exc:
        raise ScheduleSetUnreadable(source, f"malformed JSON: {exc}") from None
    schedules = document.get("schedules") if isinstance(document, dict) else None
    if isinstance(schedules, dict) and len(schedules) > MAX_MEMBERS:
        raise too_many_members(source, len(schedules))
    return _mapping(document, source)


def read_document(path: Path, source: str | None = None) -> Mapping[object, object]:
    """The document in the file at ``path`` (``source``, default the path, names it).

    A file of :data:`MAX_DOCUMENT_BYTES` or more is refused before it is read.
    """
    name = source if source is not None else str(path)
    try:
        size = path.stat().st_size
        if size >= MAX_DOCUMENT_BYTES:
            raise ScheduleSetUnreadable(
                name, f"is {size} bytes; a document must be smaller than {MAX_DOCUMENT_BYTES}"
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise ScheduleSetUnreadable(name, f"cannot be read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScheduleSetUnreadable(name, f"is not UTF-8 text (byte {exc.start})") from None
    return parse_document(text, name)
