"""Reading a ``ScheduleSet`` document: bounded size, YAML without surprises.

The loader is PyYAML's safe loader with YAML 1.2's core scalars: only ``true``/``false`` are
booleans (``on``, ``off``, ``yes``, ``no`` stay strings: ``notify.on`` is a key), timestamps stay
the text they were written as, integers are decimal, and a key written twice or an alias is an
error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node

from ..._exceptions import SchedulerError

MAX_DOCUMENT_BYTES = 10 * 1024 * 1024
"""A document of this size or more is refused before it is parsed."""


class ScheduleSetUnreadable(SchedulerError):
    """A schedule-set document cannot be read: missing, too large, not UTF-8, malformed YAML,
    or not a single mapping. ``.source`` names it; ``.line``/``.column`` (1-based) point into
    it when the parser said where."""

    def __init__(
        self, source: str, message: str, *, line: int | None = None, column: int | None = None
    ) -> None:
        self.source = source
        self.message = message
        self.line = line
        self.column = column
        where = source if line is None else f"{source}:{line}:{column}"
        super().__init__(f"{where}: {message}")


class SetLoader(yaml.SafeLoader):
    """The safe loader with YAML 1.2 core scalars; duplicate keys and aliases refused."""

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        """A node; an alias (``*name``) is refused: a few of them can stand for gigabytes."""
        if self.check_event(AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in the stubs
            raise ComposerError(None, None, "aliases (*name) are not accepted", event.start_mark)
        return super().compose_node(parent, index)

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


def parse_document(text: str, source: str) -> dict[str, Any]:
    """The document in ``text`` (``source`` names it in errors) as a mapping.

    Raises :class:`ScheduleSetUnreadable` for malformed YAML (with its line and column), more
    than one document, or a top level that is not a mapping.
    """
    if text.lstrip().startswith("{"):
        return _parse_json(text, source)
    try:
        documents = list(yaml.load_all(text, Loader=SetLoader))
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
    if len(documents) != 1:
        raise ScheduleSetUnreadable(source, f"must hold one document, found {len(documents)}")
    document = documents[0]
    if not isinstance(document, dict):
        raise ScheduleSetUnreadable(
            source, f"must be a mapping (apiVersion, kind, ...), got {type(document).__name__}"
        )
    return document


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a schedule accepts")


def _parse_json(text: str, source: str) -> dict[str, Any]:
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
    if not isinstance(document, dict):
        raise ScheduleSetUnreadable(
            source, f"must be a mapping (apiVersion, kind, ...), got {type(document).__name__}"
        )
    return document


def read_document(path: Path, source: str | None = None) -> dict[str, Any]:
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
