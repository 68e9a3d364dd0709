"""Secrets never reach a transport child: real children report the environment they got."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import studio_outbox
from studio_outbox import CommandTransport, DispatchEnvelope

SECRETS = {
    "LIONAGI_STUDIO_AUTH_TOKEN": "auth-secret",
    "LIONAGI_STUDIO_WEBHOOK_SECRET": "whsec_c2VjcmV0",
    "GITHUB_TOKEN": "ghp_secret",
}
DUMP_ENV = (
    "import json, os, sys; open(sys.argv[1], 'a').write(json.dumps(dict(os.environ)) + '\\n')"
)


def _template(out: Path) -> list[str]:
    return [sys.executable, "-S", "-c", DUMP_ENV, str(out)]


def _seen(out: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.fixture
def secrets_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("STUDIO_TEST_ORDINARY", "kept")


def _envelope() -> DispatchEnvelope:
    return DispatchEnvelope("d1", "k", "ops", 1, "{}")


@pytest.mark.usefixtures("secrets_set")
async def test_default_strips_every_secret_and_keeps_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "env.jsonl"
    result = await CommandTransport(_template(out)).send(_envelope())
    assert result.ok, result.error
    (env,) = _seen(out)
    assert not set(SECRETS) & set(env)
    assert env["STUDIO_TEST_ORDINARY"] == "kept"
    assert env["LIONAGI_DISPATCH_ID"] == "d1" and env["LIONAGI_DISPATCH_ATTEMPT"] == "1"


@pytest.mark.usefixtures("secrets_set")
async def test_passthrough_keeps_only_the_named_secret(tmp_path: Path) -> None:
    out = tmp_path / "env.jsonl"
    transport = CommandTransport(_template(out), passthrough={"GITHUB_TOKEN"})
    assert (await transport.send(_envelope())).ok
    (env,) = _seen(out)
    assert env["GITHUB_TOKEN"] == "ghp_secret"
    assert "LIONAGI_STUDIO_AUTH_TOKEN" not in env
    assert "LIONAGI_STUDIO_WEBHOOK_SECRET" not in env


async def test_each_send_sees_the_environment_as_it_is_then(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The filtered environment is reused between sends only while os.environ is unchanged.
    out = tmp_path / "env.jsonl"
    transport = CommandTransport(_template(out))
    monkeypatch.setenv("STUDIO_TEST_CHANGING", "one")
    assert (await transport.send(_envelope())).ok
    assert (await transport.send(_envelope())).ok
    monkeypatch.setenv("STUDIO_TEST_CHANGING", "two")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_set_later")
    assert (await transport.send(DispatchEnvelope("d2", "k", "ops", 2, "{}"))).ok
    monkeypatch.delenv("STUDIO_TEST_CHANGING")
    assert (await transport.send(_envelope())).ok
    first, again, changed, removed = _seen(out)
    assert first["STUDIO_TEST_CHANGING"] == again["STUDIO_TEST_CHANGING"] == "one"
    assert changed["STUDIO_TEST_CHANGING"] == "two"
    assert "GITHUB_TOKEN" not in changed  # a secret set after the first send is still removed
    assert changed["LIONAGI_DISPATCH_ID"] == "d2" and changed["LIONAGI_DISPATCH_ATTEMPT"] == "2"
    assert "STUDIO_TEST_CHANGING" not in removed
    assert removed["LIONAGI_DISPATCH_ID"] == "d1" and removed["LIONAGI_DISPATCH_ATTEMPT"] == "1"


@pytest.mark.usefixtures("secrets_set")
async def test_explicit_env_is_used_as_given_minus_secrets(tmp_path: Path) -> None:
    out = tmp_path / "env.jsonl"
    given = {"PATH": "/usr/bin:/bin", "ONLY_THIS": "1", "LIONAGI_STUDIO_AUTH_TOKEN": "x"}
    assert (await CommandTransport(_template(out), env=given).send(_envelope())).ok
    (env,) = _seen(out)
    assert "STUDIO_TEST_ORDINARY" not in env  # not inherited from this process
    assert "LIONAGI_STUDIO_AUTH_TOKEN" not in env
    assert env["ONLY_THIS"] == "1"
    assert given["LIONAGI_STUDIO_AUTH_TOKEN"] == "x"  # the caller's mapping is not changed


@pytest.mark.usefixtures("secrets_set")
async def test_delivery_loop_and_cli_children_never_see_secrets(
    tmp_path: Path, db_path: Path, conn: aiosqlite.Connection
) -> None:
    out = tmp_path / "env.jsonl"
    await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="ops")
    counts = await studio_outbox.deliver_due_dispatches(conn, notify_template=_template(out))
    assert counts["delivered"] == 1
    await studio_outbox.enqueue_dispatch(conn, kind="k", deliver_to="ops")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "studio_outbox",
        "deliver",
        "--db",
        str(db_path),
        "--template",
        json.dumps(_template(out)),
        "--once",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err
    seen: list[dict[str, Any]] = _seen(out)
    assert len(seen) == 2
    for env in seen:
        assert not set(SECRETS) & set(env)
        assert env["STUDIO_TEST_ORDINARY"] == "kept"


def test_transport_env_helper() -> None:
    base = {"A": "1", **SECRETS}
    assert studio_outbox.transport_env(base) == {"A": "1"}
    assert studio_outbox.transport_env(base, passthrough=["GITHUB_TOKEN"]) == {
        "A": "1",
        "GITHUB_TOKEN": "ghp_secret",
    }
    assert set(studio_outbox.SECRET_ENV_NAMES) == set(SECRETS)
