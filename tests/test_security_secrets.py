"""Secrets never reach children or transports: a real `studio serve` with the API token, the
webhook secret and a GitHub token in its environment runs a scheduled child (the fake ``li``)
and a notify transport; neither sees any of them unless LIONAGI_SCHEDULER_CHILD_ENV_PASS names
it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import count, write_script

from studio_launcher.testing import write_fake_li
from studio_state.testing import wait_for

pytestmark = pytest.mark.slow

SECRETS = {
    "LIONAGI_STUDIO_AUTH_TOKEN": "api-token-secret",
    "LIONAGI_STUDIO_WEBHOOK_SECRET": "whsec_c2VjcmV0LXdlYmhvb2sta2V5",  # valid: startup checks it
    "GITHUB_TOKEN": "ghp-secret",
}
BEARER = {"Authorization": "Bearer api-token-secret"}

DUMP_ENV = """\
import json, os, sys
target = os.path.join(os.environ["DUMP_DIR"], f"transport-{os.getpid()}.json")
with open(target + ".tmp", "w") as handle:
    json.dump(dict(os.environ), handle)
os.replace(target + ".tmp", target)
"""


def _first_entry(log: Path) -> dict[str, Any] | None:
    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        return None
    return json.loads(lines[0]) if lines and lines[0].endswith("}") else None


def _environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(): v.decode(errors="replace") for k, v in pairs}


async def _enqueue(db: Path) -> str:
    import studio_outbox
    import studio_state

    async with studio_state.connect(db) as conn:
        return await studio_outbox.enqueue_dispatch(
            conn, kind="alert", deliver_to="ops", body={"text": "hello"}
        )


def _start(studio_process: Any, tmp_path: Path, extra: dict[str, str]) -> Any:
    li = write_fake_li(tmp_path / "li-bin")
    dump = write_script(tmp_path, "dump_env.py", DUMP_ENV)
    (tmp_path / "dumps").mkdir()
    env = {
        **SECRETS,
        "LIONAGI_LI_EXECUTABLE": str(li),
        "FAKE_LI_LOG": str(tmp_path / "li.log"),
        "DUMP_DIR": str(tmp_path / "dumps"),
        "LIONAGI_STUDIO_NOTIFY_TEMPLATE": json.dumps(["python3", str(dump), "{payload}"]),
        **extra,
    }
    server = studio_process(tmp_path / "server", env=env)
    server.start()
    return server


def _run_child(server: Any, tmp_path: Path) -> dict[str, str]:
    """Trigger a scheduled agent run (the fake li sleeps) and read its environment."""
    created = server.request(
        "POST",
        "/api/schedules",
        headers=BEARER,
        json={
            "name": "child",
            "trigger_type": "interval",
            "interval_sec": 3600,
            "action_kind": "agent",
            "action_prompt": "sleep=5",
            "action_cwd": str(tmp_path),
        },
    )
    assert created.status_code == 201, created.text
    fired = server.request("POST", f"/api/schedules/{created.json()['id']}/trigger", headers=BEARER)
    assert fired.status_code == 202, fired.text
    log = tmp_path / "li.log"
    entry = wait_for(lambda: _first_entry(log), timeout=30, what="the fake li started")
    return _environ_of(int(entry["pid"]))


def test_secrets_never_reach_children_or_transports(studio_process: Any, tmp_path: Path) -> None:
    server = _start(studio_process, tmp_path, {})
    child_env = _run_child(server, tmp_path)
    assert child_env.get("LIONAGI_INVOCATION_ID"), "not the scheduled child's environment"
    leaked = {name for name in SECRETS if name in child_env}
    leaked |= {name for name, value in SECRETS.items() if value in json.dumps(child_env)}
    assert leaked == set(), f"secrets in the scheduled child's environment: {leaked}"
    # the notify transport of a dispatch
    asyncio.run(_enqueue(server.db))
    dumps = tmp_path / "dumps"
    dumped = wait_for(
        lambda: sorted(dumps.glob("transport-*.json")), timeout=30, what="the transport ran"
    )
    transport_env = json.loads(dumped[0].read_text())
    assert transport_env.get("LIONAGI_DISPATCH_ID"), "not the transport's environment"
    leaked = {name for name in SECRETS if name in transport_env}
    leaked |= {name for name, value in SECRETS.items() if value in json.dumps(transport_env)}
    assert leaked == set(), f"secrets in the notify transport's environment: {leaked}"
    # the server still has its token (auth works) and reports healthy
    assert server.request("GET", "/api/schedules").status_code == 401
    assert server.request("GET", "/api/schedules", headers=BEARER).status_code == 200
    server.stop()
    count("secret_leaks_checked", 2)


def test_an_operator_can_pass_a_named_secret_through(studio_process: Any, tmp_path: Path) -> None:
    server = _start(studio_process, tmp_path, {"LIONAGI_SCHEDULER_CHILD_ENV_PASS": "GITHUB_TOKEN"})
    child_env = _run_child(server, tmp_path)
    assert child_env.get("GITHUB_TOKEN") == "ghp-secret"
    assert "LIONAGI_STUDIO_AUTH_TOKEN" not in child_env
    assert "LIONAGI_STUDIO_WEBHOOK_SECRET" not in child_env
    server.stop()
