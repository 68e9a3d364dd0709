"""The argv transport behaves the same whichever way it watches its child.

On Linux it starts the child with ``subprocess.Popen`` and watches a pidfd on the event loop;
where pidfds are unavailable it uses ``loop.subprocess_exec``. The rest of the suite runs the
path this machine takes; these tests run the key behaviours on both.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import studio_outbox._pidfd as pidfd_module
from studio_outbox import CommandTransport, DispatchEnvelope


@pytest.fixture(params=["pidfd", "subprocess_exec"])
def watch(request: pytest.FixtureRequest) -> Iterator[str]:
    previous = pidfd_module._supported
    # The probe's answer decides the path: forcing it False takes the fallback.
    pidfd_module._supported = None if request.param == "pidfd" else False
    try:
        yield request.param
    finally:
        pidfd_module._supported = previous


def _envelope(payload: str, deliver_to: str = "ok") -> DispatchEnvelope:
    return DispatchEnvelope("abc123abc123", "k", deliver_to, 1, payload)


def test_pidfds_are_used_on_linux() -> None:
    if sys.platform.startswith("linux"):
        assert pidfd_module.pidfd_supported()


async def test_large_stdin_payload_arrives_whole(watch: str, recorder: Any) -> None:
    payload = json.dumps({"big": "x" * 500_000})
    result = await CommandTransport(recorder.template("{deliver_to}")).send(_envelope(payload))
    assert result.ok, result.error
    (send,) = recorder.sends()
    assert send["stdin"] == payload + "\n"
    assert send["argv"] == ["ok"]


async def test_child_that_ignores_stdin_succeeds(watch: str) -> None:
    result = await CommandTransport(["/bin/true"]).send(_envelope("x" * 1_000_000))
    assert result.ok


async def test_failure_is_the_stderr_tail_or_the_exit_code(watch: str, recorder: Any) -> None:
    failed = await CommandTransport(recorder.template("{deliver_to}")).send(
        _envelope("{}", deliver_to="fail:  it broke  ")
    )
    assert not failed.ok and failed.error == "it broke"
    false = await CommandTransport(["/bin/false"]).send(_envelope("{}"))
    assert not false.ok and false.error == "exit 1"


async def test_missing_program_is_a_failure(watch: str, tmp_path: Path) -> None:
    result = await CommandTransport([str(tmp_path / "no-such-notifier")]).send(_envelope("{}"))
    assert not result.ok
    assert result.error is not None and "could not start" in result.error


async def test_completion_is_the_exit_even_with_stderr_held_open(watch: str, recorder: Any) -> None:
    transport = CommandTransport(recorder.template("{deliver_to}"), timeout=5.0)
    try:
        result = await transport.send(_envelope("{}", deliver_to="detachfail:bad"))
    finally:
        os.kill(int(Path(str(recorder.log) + ".grandchild").read_text()), signal.SIGKILL)
    assert not result.ok and result.error == "bad"


async def test_timeout_kills_the_whole_group(watch: str, recorder: Any) -> None:
    result = await CommandTransport(recorder.template("hang"), timeout=1.0).send(_envelope("{}"))
    assert not result.ok and result.error is not None and "timed out after 1s" in result.error
    child = recorder.sends()[0]["pid"]
    grandchild = int(Path(str(recorder.log) + ".grandchild").read_text())
    deadline = time.monotonic() + 10
    alive = {child, grandchild}
    while alive and time.monotonic() < deadline:
        for pid in list(alive):
            stat = Path(f"/proc/{pid}/stat")
            # gone, or a zombie waiting for init: either way no longer running
            if not stat.exists() or stat.read_text().split(") ")[-1].startswith("Z"):
                alive.discard(pid)
        time.sleep(0.05)
    assert not alive, f"still running after the timeout kill: {alive}"
