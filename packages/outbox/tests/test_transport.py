from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_outbox
import studio_state
from studio_outbox import CommandTransport, DispatchEnvelope, InvalidNotifyTemplate

NASTY = "$(touch {marker}); `touch {marker}` | touch {marker} && rm -rf / ; '\"\\ {{payload}} *"


def _envelope(payload: str, deliver_to: str = "ok") -> DispatchEnvelope:
    return DispatchEnvelope("abc123abc123", "k", deliver_to, 1, payload)


async def test_whole_element_substitution_keeps_shell_metacharacters_inert(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, recorder: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    nasty = NASTY.format(marker=marker)
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn,
        kind="k",
        deliver_to=f"ok {nasty}",
        body={"text": nasty, "glob": "*", "newline": "a\nb"},
        clock=clock,
    )
    template = recorder.template(
        "--to", "{deliver_to}", "--to={deliver_to}", "{payload}", "x{payload}", "{payload}"
    )
    counts = await studio_outbox.deliver_due_dispatches(conn, notify_template=template, clock=clock)
    assert counts["delivered"] == 1
    (send,) = recorder.sends()
    argv = send["argv"]
    assert argv[0] == "--to"
    assert argv[1] == f"ok {nasty}"  # one element, exactly the value
    assert argv[2] == "--to={deliver_to}"  # a placeholder inside an element stays literal
    assert argv[4] == "x{payload}"
    assert argv[3] == argv[5]
    payload = json.loads(argv[3])
    assert payload["dispatch_id"] == dispatch_id
    assert payload["body"] == {"text": nasty, "glob": "*", "newline": "a\nb"}
    assert send["stdin"] == ""  # the payload went in argv, so nothing on stdin
    assert not marker.exists()


async def test_payload_goes_to_stdin_without_a_payload_element(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, recorder: Any, probe: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="ok", body={"big": "x" * 300_000}, clock=clock
    )
    template = recorder.template("{deliver_to}")
    counts = await studio_outbox.deliver_due_dispatches(conn, notify_template=template, clock=clock)
    assert counts["delivered"] == 1
    (send,) = recorder.sends()
    assert send["argv"] == ["ok"]
    assert send["stdin"].endswith("\n")
    assert json.loads(send["stdin"]) == json.loads((await probe.row(dispatch_id))["payload"])


async def test_transport_timeout_kills_the_process_group(tmp_path: Path, recorder: Any) -> None:
    transport = CommandTransport(recorder.template("hang"), timeout=1.0)
    started = time.monotonic()
    result = await transport.send(_envelope("{}"))
    assert time.monotonic() - started < 30  # liveness only
    assert not result.ok
    assert result.error is not None and "timed out after 1s" in result.error
    grandchild = int(Path(str(recorder.log) + ".grandchild").read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        # A killed grandchild may linger as a zombie until init reaps it.
        stat = Path(f"/proc/{grandchild}/stat")
        if stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"):
            break
        time.sleep(0.05)
    else:
        pytest.fail("the transport's grandchild survived the timeout kill")


async def test_timeout_through_delivery_records_the_failure(
    conn: aiosqlite.Connection, clock: studio_state.ManualClock, recorder: Any, probe: Any
) -> None:
    dispatch_id = await studio_outbox.enqueue_dispatch(
        conn, kind="k", deliver_to="sleep:30", clock=clock
    )
    transport = CommandTransport(recorder.template("{deliver_to}"), timeout=0.5)
    counts = await studio_outbox.deliver_due_dispatches(conn, transport=transport, clock=clock)
    assert counts["retried"] == 1
    row = await probe.row(dispatch_id)
    assert "timed out after 0.5s and was killed" in row["last_error"]


@pytest.mark.parametrize(
    ("dest", "ok", "error"), [("detach", True, None), ("detachfail:bad", False, "bad")]
)
async def test_completion_is_the_exit_not_stderr_eof(
    recorder: Any, dest: str, ok: bool, error: str | None
) -> None:
    transport = CommandTransport(recorder.template("{deliver_to}"), timeout=5.0)
    try:
        result = await transport.send(_envelope("{}", deliver_to=dest))
    finally:
        grandchild = int(Path(str(recorder.log) + ".grandchild").read_text())
        os.kill(grandchild, signal.SIGKILL)
    # The grandchild still holds the transport's stderr: waiting for EOF would time out.
    assert result.ok is ok
    assert result.error == error


def test_default_transport_timeout_is_ten_seconds() -> None:
    assert CommandTransport(["/bin/true"]).timeout == 10.0


async def test_stderr_tail_and_exit_code_are_the_error(recorder: Any) -> None:
    result = await CommandTransport(recorder.template("{deliver_to}")).send(
        _envelope("{}", deliver_to="fail:  it broke  ")
    )
    assert not result.ok and result.error == "it broke"
    false = await CommandTransport(["/bin/false"]).send(_envelope("{}"))
    assert not false.ok and false.error == "exit 1"
    ok = await CommandTransport(["/bin/true", "{deliver_to}", "{payload}"]).send(_envelope("{}"))
    assert ok.ok and ok.error is None


async def test_missing_program_is_a_failure_not_an_exception(tmp_path: Path) -> None:
    result = await CommandTransport([str(tmp_path / "no-such-notifier")]).send(_envelope("{}"))
    assert not result.ok
    assert result.error is not None and "could not start" in result.error


async def test_transport_that_ignores_stdin_still_succeeds() -> None:
    result = await CommandTransport(["/bin/true"]).send(_envelope("x" * 1_000_000))
    assert result.ok


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ([], "at least the program"),
        ("notify {payload}", "JSON list"),
        ({"argv": ["x"]}, "JSON list"),
        (["  "], "must not be blank"),
        (["notify", 3], "element 1 must be a string"),
        (["notify", "a\x00b"], "NUL"),
    ],
)
def test_invalid_templates_are_refused_up_front(template: Any, fragment: str) -> None:
    with pytest.raises(InvalidNotifyTemplate, match=fragment) as caught:
        studio_outbox.validate_notify_template(template)
    assert caught.value.field == "notify_template"
    with pytest.raises(InvalidNotifyTemplate):
        CommandTransport(template)


def test_render_argv_substitutes_only_whole_elements() -> None:
    assert studio_outbox.render_argv(
        ["n", "{deliver_to}", "{payload}", "{payload}x", "{{payload}}"],
        payload='{"a": 1}',
        deliver_to="$HOME",
    ) == ["n", "$HOME", '{"a": 1}', "{payload}x", "{{payload}}"]
