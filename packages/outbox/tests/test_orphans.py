"""A sender killed mid-send leaves its transport running: the next attempt's send ends it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from studio_outbox import CommandTransport, DispatchEnvelope
from studio_state.testing import pid_alive

ORPHAN = "import time; time.sleep(120)"


def _sender(dispatch_id: str, attempt: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, LIONAGI_DISPATCH_ID=dispatch_id, LIONAGI_DISPATCH_ATTEMPT=str(attempt))
    return subprocess.Popen([sys.executable, "-c", ORPHAN], env=env, start_new_session=True)


async def test_a_resend_kills_the_orphaned_transport_of_an_earlier_attempt(
    tmp_path: Path,
) -> None:
    orphan = _sender("aaaaaaaaaaaa", 1)
    same_attempt = _sender("aaaaaaaaaaaa", 2)  # not earlier: left alone
    other = _sender("bbbbbbbbbbbb", 1)  # another dispatch: left alone
    seen = tmp_path / "env.json"
    dump = (
        "import json, os, sys; json.dump({k: v for k, v in os.environ.items() "
        "if k.startswith('LIONAGI_DISPATCH')}, open(sys.argv[1], 'w'))"
    )
    try:
        time.sleep(0.2)  # the orphans exist with their environment
        transport = CommandTransport([sys.executable, "-c", dump, str(seen)])
        result = await transport.send(DispatchEnvelope("aaaaaaaaaaaa", "k", "ops", 2, "{}"))
        assert result.ok, result.error
        orphan.wait(timeout=10)
        assert not pid_alive(orphan.pid)
        assert same_attempt.poll() is None and other.poll() is None
        assert json.loads(seen.read_text()) == {
            "LIONAGI_DISPATCH_ID": "aaaaaaaaaaaa",
            "LIONAGI_DISPATCH_ATTEMPT": "2",
        }
    finally:
        for proc in (orphan, same_attempt, other):
            proc.kill()
            proc.wait()


async def test_a_first_attempt_kills_nothing() -> None:
    bystander = _sender("cccccccccccc", 1)
    try:
        time.sleep(0.2)
        result = await CommandTransport(["true"]).send(
            DispatchEnvelope("cccccccccccc", "k", "ops", 1, "{}")
        )
        assert result.ok
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
