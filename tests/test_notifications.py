"""Notifications through real parts: `studio serve`, real children, a loopback webhook receiver.

The receiver is the outbox's test receiver (packages/outbox/tests/webhook_receiver.py), loaded
by path. Signatures are checked with ``studio_outbox.verify_webhook``, as a consumer would.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, count, db_rows, read_marker, write_script

import studio_outbox
from studio_state.testing import free_port, pid_alive, wait_for

SECRET = "whsec_" + base64.b64encode(b"studio-notify-tests-secret-32byt").decode()
_RECEIVER = "studio_tests_webhook_receiver"


def _receiver_module() -> Any:
    if _RECEIVER not in sys.modules:
        path = ROOT / "packages" / "outbox" / "tests" / "webhook_receiver.py"
        spec = importlib.util.spec_from_file_location(_RECEIVER, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[_RECEIVER] = module
        spec.loader.exec_module(module)
    return sys.modules[_RECEIVER]


@pytest.fixture
def receiver() -> Iterator[Any]:
    with _receiver_module().serve_receiver() as running:
        yield running


def studio_cli(server: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """``studio ARGS`` against the server's database, in the server's environment."""
    proc = subprocess.run(
        [sys.executable, "-m", "studio_cli", *args],
        capture_output=True,
        text=True,
        env={**server.env, "LIONAGI_STUDIO_DB": str(server.db), "LIONAGI_STUDIO_URL": server.url},
        cwd=server.base,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


# The child records itself, SIGKILLs the server, and exits 3 at once: the server dies after
# the child started and before any terminal write; the child's exit is never recorded.
KILL_THEN_EXIT = textwrap.dedent(
    """
    import json, os, signal, sys
    marker = sys.argv[1]
    if os.path.exists(marker):
        sys.exit(0)
    with open(marker + ".tmp", "w") as handle:
        json.dump({"pid": os.getpid(), "grandchild": os.getpid()}, handle)
    os.replace(marker + ".tmp", marker)
    os.kill(os.getppid(), signal.SIGKILL)
    sys.exit(3)
    """
)


@pytest.mark.slow
def test_kill9_between_child_exit_and_terminal_write_notifies_exactly_once(
    studio_process: Any, receiver: Any
) -> None:
    server = studio_process(env={"LIONAGI_STUDIO_WEBHOOK_SECRET": SECRET})
    marker = server.base / "marker.json"
    child = write_script(server.base, "child.py", KILL_THEN_EXIT)
    server.start()
    created = server.request(
        "POST",
        "/api/schedules",
        json={
            "name": "doomed",
            "trigger_type": "interval",
            "interval_sec": 1,
            "action_kind": "command",
            "action_command": "python3",
            "action_command_args": [str(child), str(marker)],
            "action_cwd": str(server.base),
            "max_runs": 1,
            "notify": {"deliver_to": receiver.url("/ok"), "on": ["failed"]},
        },
    )
    assert created.status_code == 201, created.text
    assert server.proc is not None
    server.proc.wait(timeout=60)  # killed by its child
    count("crashes_survived")
    info = wait_for(lambda: read_marker(marker), what="the child wrote its marker")
    wait_for(lambda: not pid_alive(int(info["pid"])), what="the child exited")
    (run,) = server.rows("SELECT * FROM schedule_runs WHERE status != 'skipped'")
    assert run["status"] == "running"  # the terminal write never happened
    assert server.rows("SELECT id FROM dispatch_outbox") == []

    server.restart()  # reconciliation: daemon_restart, and its notification in that write
    (request,) = receiver.wait_for(1, timeout=30)
    signal = studio_outbox.verify_webhook(SECRET, request.headers, request.body)
    assert signal["kind"] == "run.failed"
    assert signal["body"]["run_id"] == run["id"]
    assert signal["body"]["reason_code"] == "run.failed.daemon_restart"
    wait_for(
        lambda: server.rows("SELECT status FROM dispatch_outbox") == [{"status": "delivered"}],
        what="the notification's outcome is written",
    )
    server.kill9()  # and once more: nothing is enqueued or sent again
    server.restart()
    time.sleep(2.0)  # a few 1 s ticks: room for a duplicate to show
    assert len(receiver.received()) == 1
    rows = server.rows("SELECT kind, dedup_key, status FROM dispatch_outbox")
    assert rows == [
        {"kind": "run.failed", "dedup_key": f"run:{run['id']}:run.failed", "status": "delivered"}
    ]
    assert server.stop() in (0, -15)


def _doc_block(marker: str) -> str:
    """The python code block of docs/recipes.md that contains ``marker``."""
    text = (ROOT / "docs" / "recipes.md").read_text(encoding="utf-8")
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        if marker in block:
            return textwrap.dedent(block)
    raise AssertionError(f"no python block with {marker!r} in docs/recipes.md")


def test_recipe_webhook_when_a_schedule_fails_verify_and_ack(
    studio_process: Any, tmp_path: Path
) -> None:
    """docs/recipes.md, "Get a webhook when a schedule fails": each step as written there,
    with the recipe's own receiver.py."""
    server = studio_process(env={"LIONAGI_STUDIO_WEBHOOK_SECRET": SECRET})
    server.start()
    receiver_py = write_script(server.base, "receiver.py", _doc_block("verify_webhook"))
    port = free_port()
    log = server.base / "receiver.log"
    with open(log, "wb") as out:
        hook = subprocess.Popen(
            [sys.executable, str(receiver_py), str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=server.env | {"LIONAGI_STUDIO_WEBHOOK_SECRET": SECRET},
        )
    try:
        write_script(server.base, "report.py", 'import sys\nsys.exit("no data today")\n')
        created = studio_cli(
            server,
            *("schedule", "create", "nightly-report", "--interval", "1d"),
            *("--command", "python3", "--command-arg", "report.py"),
            *("--notify-to", f"http://127.0.0.1:{port}/studio", "--notify-ack", "--json"),
        )
        assert created.returncode == 0, created.stderr
        assert json.loads(created.stdout)["notify"]["ack_required"] is True
        fired = studio_cli(server, "schedule", "trigger", "nightly-report", "--wait")
        assert fired.returncode == 1 and "ended failed" in fired.stderr

        printed = wait_for(
            lambda: "ack with:" in log.read_text() and log.read_text(), what="receiver output"
        )
        first, second = printed.splitlines()[:2]
        assert first.startswith("run.failed: nightly-report run ")
        assert first.endswith("exit 1: the child exited with code 1")
        ack_argv = second.removeprefix("ack with: ").split()
        assert ack_argv[:3] == ["studio", "dispatch", "ack"]
        acked = studio_cli(server, *ack_argv[1:])
        assert acked.returncode == 0, acked.stderr
        shown = studio_cli(server, "dispatch", "show", ack_argv[3], "--json")
        assert json.loads(shown.stdout)["status"] == "acked"
        assert "refused" not in log.read_text()
    finally:
        hook.kill()
        hook.wait()
    assert "whsec_" not in server.all_logs()
    assert server.stop() in (0, -15)


def test_recipe_webhook_signature_is_checked_by_the_consumer(
    studio_process: Any, receiver: Any
) -> None:
    """What the recipe's receiver relies on: the request verifies with the secret, a changed
    body does not."""
    server = studio_process(env={"LIONAGI_STUDIO_WEBHOOK_SECRET": SECRET})
    server.start()
    sent = server.request(
        "POST",
        "/api/dispatch",
        json={"kind": "deploy.finished", "deliver_to": receiver.url("/ok"), "body": {"x": 1}},
    )
    assert sent.status_code == 201, sent.text
    (request,) = receiver.wait_for(1, timeout=30)
    signal = studio_outbox.verify_webhook(SECRET, request.headers, request.body)
    assert signal["dispatch_id"] == sent.json()["id"] == request.headers["webhook-id"]
    with pytest.raises(studio_outbox.WebhookVerificationError):
        studio_outbox.verify_webhook(SECRET, request.headers, request.body + b" ")
    assert server.stop() in (0, -15)


def test_recipe_sync_producer_enqueues_in_its_own_transaction(
    studio_process: Any, receiver: Any
) -> None:
    """docs/recipes.md, "A synchronous (Flask-style) producer": the script as written there,
    plus a rolled-back change that must take its notification with it."""
    server = studio_process(env={"LIONAGI_STUDIO_WEBHOOK_SECRET": SECRET})
    server.start()
    recipe = _doc_block("outbox.connect").replace(
        "http://127.0.0.1:9000/orders", receiver.url("/ok")
    )
    rollback = textwrap.dedent(
        f"""
        try:
            with conn:
                conn.execute("INSERT INTO orders (id) VALUES (43)")
                outbox.enqueue_dispatch(
                    conn, kind="order.created", deliver_to={receiver.url("/ok")!r},
                    body={{"order_id": 43}}, dedup_key="order:43",
                )
                raise RuntimeError("payment declined")
        except RuntimeError:
            pass
        print(outbox.count_dispatches(conn))
        """
    )
    producer = write_script(server.base, "producer.py", recipe + rollback)
    done = subprocess.run(
        [sys.executable, str(producer), str(server.db)],
        capture_output=True,
        text=True,
        timeout=60,
        env=server.env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
    (request,) = receiver.wait_for(1, timeout=30)
    signal = studio_outbox.verify_webhook(SECRET, request.headers, request.body)
    assert signal["body"] == {"order_id": 42}
    wait_for(
        lambda: (
            db_rows(server.db, "SELECT status FROM dispatch_outbox") == [{"status": "delivered"}]
        ),
        what="delivered",
    )
    assert server.stop() in (0, -15)
