"""Test support: a stand-in for the ``li`` CLI (shipped for the tests of Studio's packages).

:func:`write_fake_li` writes an executable Python script that accepts the argv shapes the
launcher builds (reference A13) and behaves as the prompt says, so a test can steer a child run
without lionagi installed. Not for production use.

Tokens in the prompt (for ``o flow -f FILE``, the file's text counts as the prompt):

- ``exit=N``: exit with status N (default 0);
- ``sleep=S``: sleep S seconds first;
- ``stderr=TEXT``: write TEXT (up to the next whitespace) to stderr;
- ``usage=STATUS[:INPUT[:OUTPUT[:COST]]]`` (repeatable): with ``$LIONAGI_STUDIO_DB`` set (a
  SQLite file, or a ``postgresql://`` URL through psycopg), insert
  one ``sessions`` row linked to ``$LIONAGI_INVOCATION_ID`` (skipped silently when the table
  does not exist);
- ``term=ignore``: ignore SIGTERM (so only SIGKILL stops it);
- ``grandchild=S``: start a grandchild that sleeps S seconds holding stderr, in the same
  process group;
- ``setsid=S``: start a grandchild that sleeps S seconds in a new session (it escapes the
  process group, as a daemon would);
- ``stdout=TEXT``: write TEXT (up to the next whitespace) and a newline to stdout, before
  any sleep.

With ``$FAKE_LI_LOG`` set it appends one JSON line per run: ``argv``, ``cwd``, ``pid``,
``invocation_id``, ``studio_db``, ``command`` (agent, o flow, o fanout, play, engine run),
``model``, ``prompt``, ``options``, ``grandchild_pid`` and ``setsid_pid``. Unknown flags exit 2
(like argparse); positional-count errors exit 1 (like ``li``).

The :func:`fake_li` fixture writes it into the test's ``tmp_path``.

The launcher's own tests install nothing but the launcher (it is a leaf), so the helpers of
:mod:`studio_state.testing` that they need stand here too, with the same names and behaviour:
:func:`wait_for`, :func:`eventually`, :func:`proc_state`, :func:`pid_alive`,
:func:`kill_quietly` and the autouse :func:`clean_environment` fixture. Every other suite takes
them from :mod:`studio_state.testing`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

__all__ = [
    "FAKE_LI_SCRIPT",
    "clean_environment",
    "eventually",
    "fake_li",
    "kill_quietly",
    "pid_alive",
    "proc_state",
    "wait_for",
    "write_fake_li",
]

T = TypeVar("T")

FAKE_LI_SCRIPT = r'''
import json, os, re, signal, sqlite3, subprocess, sys, time, uuid

STARTED = time.time()
VALUE_FLAGS = {
    "agent": {"--agent": "agent", "-a": "agent", "--project": "project",
              "--invocation": "invocation"},
    "flow": {"--project": "project", "-f": "file", "--file": "file", "--invocation": "invocation"},
    "fanout": {"--project": "project", "--invocation": "invocation"},
    "engine": {"--model": "model", "--max-depth": "max_depth", "--max-agents": "max_agents",
               "--test-cmd": "test_cmd", "--export-dir": "export_dir", "--effort": "effort",
               "--invocation": "invocation"},
}


def usage_error(message):
    sys.stderr.write("fake-li: error: %s\n" % message)
    sys.exit(2)


def fail(message):
    sys.stderr.write("fake-li: %s\n" % message)
    sys.exit(1)


def parse_flags(kind, tokens):
    """Flags before the first '--'; everything after it (and bare words) is positional."""
    options, positional, i = {}, [], 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            positional.extend(tokens[i + 1:])
            break
        if token.startswith("-") and token != "-":
            name = VALUE_FLAGS[kind].get(token)
            if name is None:
                usage_error("unrecognized arguments: %s" % token)
            if i + 1 >= len(tokens):
                usage_error("argument %s: expected one argument" % token)
            options[name] = tokens[i + 1]
            i += 2
            continue
        positional.append(token)
        i += 1
    return options, positional


def model_and_prompt(positional, prompt_optional=False):
    if len(positional) > 2:
        fail("too many positional arguments: %r" % (positional,))
    if not positional:
        if prompt_optional:
            return None, None
        fail("no prompt given")
    if len(positional) == 1:
        return None, positional[0]
    return (positional[0] or None), positional[1]


def parse(args):
    if not args:
        usage_error("a command is required")
    head, rest = args[0], args[1:]
    if head == "agent":
        options, positional = parse_flags("agent", rest)
        model, prompt = model_and_prompt(positional)
        return "agent", model, prompt, options
    if head == "o":
        if not rest or rest[0] not in ("flow", "fanout"):
            usage_error("o: expected 'flow' or 'fanout'")
        kind = rest[0]
        options, positional = parse_flags(kind, rest[1:])
        model, prompt = model_and_prompt(positional, prompt_optional="file" in options)
        if "file" in options:
            with open(options["file"], encoding="utf-8") as handle:
                options["file_text"] = handle.read()
        return "o " + kind, model, prompt, options
    if head == "play":
        if not rest or rest[0].startswith("-"):
            fail("usage: li play NAME [PROMPT]")
        for token in rest[1:]:
            if token.startswith("-"):
                usage_error("unrecognized arguments: %s" % token)
        model, prompt = model_and_prompt(rest[1:], prompt_optional=True)
        return "play", model, prompt, {"playbook": rest[0]}
    if head == "engine":
        if not rest or rest[0] != "run":
            usage_error("engine: expected 'run'")
        options, positional = parse_flags("engine", rest[1:])
        if len(positional) != 2:
            usage_error("engine run: expected KIND SPEC")
        if positional[0] == "coding" and not options.get("test_cmd"):
            fail("coding engine requires --test-cmd")
        options["engine_kind"] = positional[0]
        return "engine run", options.get("model"), positional[1], options
    usage_error("unknown command %r" % head)


def record_usage(text, invocation_id):
    db = os.environ.get("LIONAGI_STUDIO_DB")
    if not db:
        return
    for spec in re.findall(r"usage=(\S+)", text):
        parts = spec.split(":") + [None] * 4
        status = parts[0]
        number = lambda v, cast: None if v in (None, "", "none") else cast(v)
        now = time.time()
        row = (uuid.uuid4().hex[:12], invocation_id, status, number(parts[1], int),
               number(parts[2], int), number(parts[3], float), STARTED, now, now)
        insert = ("INSERT INTO sessions (id, invocation_id, status, input_tokens, "
                  "output_tokens, total_cost_usd, started_at, ended_at, created_at) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
        if db.startswith(("postgresql://", "postgres://")):
            import psycopg
            with psycopg.connect(db) as conn:  # commits on leaving the block
                conn.execute(insert.replace("?", "%s"), row)
            continue
        try:
            conn = sqlite3.connect(db, timeout=10)
            try:
                with conn:
                    conn.execute(insert, row)
            finally:
                conn.close()
        except sqlite3.Error as exc:
            if "no such table" not in str(exc):
                sys.stderr.write("fake-li: usage not recorded: %s\n" % exc)


def main():
    command, model, prompt, options = parse(sys.argv[1:])
    text = " ".join(x for x in (prompt, options.get("file_text")) if x)
    invocation_id = options.get("invocation") or os.environ.get("LIONAGI_INVOCATION_ID")
    if "term=ignore" in text.split():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grandchild_pid = None
    found = re.search(r"grandchild=([0-9.]+)", text)
    if found:
        grandchild_pid = subprocess.Popen(
            [sys.executable, "-c", "import time, sys; time.sleep(float(sys.argv[1]))",
             found.group(1)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL).pid
    setsid_pid = None
    found = re.search(r"setsid=([0-9.]+)", text)
    if found:
        setsid_pid = subprocess.Popen(
            [sys.executable, "-c", "import time, sys; time.sleep(float(sys.argv[1]))",
             found.group(1)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True).pid
    log = os.environ.get("FAKE_LI_LOG")
    if log:
        entry = {"argv": sys.argv[1:], "cwd": os.getcwd(), "pid": os.getpid(),
                 "invocation_id": os.environ.get("LIONAGI_INVOCATION_ID"),
                 "studio_db": os.environ.get("LIONAGI_STUDIO_DB"), "command": command,
                 "model": model, "prompt": prompt,
                 "options": {k: v for k, v in options.items() if k != "file_text"},
                 "grandchild_pid": grandchild_pid, "setsid_pid": setsid_pid}
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode("utf-8"))
        finally:
            os.close(fd)
    for message in re.findall(r"stdout=(\S+)", text):
        sys.stdout.write(message + "\n")
    sys.stdout.flush()
    found = re.search(r"sleep=([0-9.]+)", text)
    if found:
        time.sleep(float(found.group(1)))
    for message in re.findall(r"stderr=(\S+)", text):
        sys.stderr.write(message + "\n")
    sys.stderr.flush()
    record_usage(text, invocation_id)
    found = re.search(r"exit=(-?[0-9]+)", text)
    sys.exit(int(found.group(1)) if found else 0)


main()
'''


def write_fake_li(directory: Path) -> Path:
    """Write the fake ``li`` script as ``directory/li`` (mode 0755) and return its path.

    Its shebang is this interpreter (``sys.executable``); see the module docstring for how the
    prompt steers it. Use it as ``resolve_li_executable(configured=str(path))`` or as an
    ``executable_prefix=[str(path)]``.
    """
    interpreter = sys.executable
    if not interpreter or not os.path.isabs(interpreter):
        raise RuntimeError(f"sys.executable {interpreter!r} is not an absolute path")
    if any(ch.isspace() for ch in interpreter) or len(interpreter) > 250:
        raise RuntimeError(f"sys.executable {interpreter!r} cannot be used in a shebang line")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "li"
    path.write_text(f"#!{interpreter}\n{FAKE_LI_SCRIPT.lstrip()}", encoding="utf-8")
    path.chmod(0o755)
    return path


@pytest.fixture
def fake_li(tmp_path: Path) -> Path:
    """The fake ``li`` written into ``tmp_path/bin`` (see :func:`write_fake_li`)."""
    return write_fake_li(tmp_path / "bin")


# -- the launcher suite's helpers (see the module docstring) ---------------------------------
def wait_for(predicate: Callable[[], T], timeout: float = 30.0, *, interval: float = 0.02) -> T:
    """Call ``predicate`` until it is truthy and return it; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not met within {timeout}s: {predicate}")
        time.sleep(interval)
    return value


async def eventually(
    predicate: Callable[[], T], timeout: float = 30.0, *, interval: float = 0.02
) -> T:
    """:func:`wait_for` for a coroutine: sleeps with ``asyncio.sleep`` between tries."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not met within {timeout}s: {predicate}")
        await asyncio.sleep(interval)
    return value


def proc_state(pid: int) -> str | None:
    """The ``/proc/<pid>/stat`` state letter of ``pid`` (``R``, ``S``, ``Z`` …), or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 1 :].split()[0].decode()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process; a zombie nobody reaped yet counts as gone."""
    return proc_state(pid) not in (None, "Z", "X")


def kill_quietly(*pids: int) -> None:
    """SIGKILL each pid, ignoring ones already gone (cleanup of children a test left)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove ``LIONAGI_*`` and ``GITHUB_TOKEN`` for the test (restored afterwards)."""
    for name in list(os.environ):
        if name.startswith("LIONAGI_") or name == "GITHUB_TOKEN":
            monkeypatch.delenv(name)
