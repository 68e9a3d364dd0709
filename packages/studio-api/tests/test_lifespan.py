"""The lifespan drives the engine: it starts before serving, fires while served, stops cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from studio_api.__main__ import main as studio_main
from studio_api.testing import StudioServer


def _create(studio: Any, body: dict[str, Any]) -> dict[str, Any]:
    answer = studio.client.post("/api/schedules", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def _runs(studio: Any, schedule_id: str, **params: Any) -> list[dict[str, Any]]:
    answer = studio.client.get(f"/api/schedules/{schedule_id}/runs", params=params)
    assert answer.status_code == 200
    return list(answer.json()["runs"])


def test_the_engine_runs_while_served_and_stops_on_shutdown(
    serve: Callable[..., Any], wait: Any
) -> None:
    studio = serve()
    health = studio.client.get("/api/health").json()
    assert health["status"] == "ok"
    assert health["backend"] == "sqlite"
    assert health["wake_listening"] is None  # PostgreSQL only: SQLite polls data_version
    assert health["leader"] is True, "on SQLite the started engine holds the file lock"
    assert health["node_id"] == f"{socket.gethostname()}:{os.getpid()}"
    assert health["scheduler"]["running"] is True
    assert health["scheduler"]["tick_seconds"] == 1
    assert set(health["scheduler"]) >= {"last_tick_at", "in_flight", "due_backlog"}
    assert set(health["dispatch"]) == {
        "backlog",
        "delivery_paused",
        "delivery_paused_transports",
        "delivery_paused_dispatches",
        "delivery_paused_reason",
        "transports",
    }
    assert health["dispatch"]["delivery_paused"] is False  # no row waits for a transport
    assert health["dispatch"]["transports"] == {
        "argv": {
            "state": "paused",
            "reason": "no notify template (LIONAGI_STUDIO_NOTIFY_TEMPLATE)",
            "signed": None,
        },
        "webhook": {
            "state": "active",
            "reason": "unsigned: no LIONAGI_STUDIO_WEBHOOK_SECRET",
            "signed": False,
        },
    }

    def ticked_twice() -> float | None:
        first = health["scheduler"]["last_tick_at"] or 0
        now = studio.client.get("/api/health").json()["scheduler"]["last_tick_at"]
        return now if now and now > first else None

    wait(ticked_twice)
    engine = studio.engine
    studio.stop()
    assert engine.health()["running"] is False
    assert engine.health()["leader"] is False, "the file lock is released at stop"
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{studio.base_url}/api/health", timeout=2)


def test_a_schedule_fires_while_served(
    studio: Any,
    command_schedule: Callable[..., Any],
    script: Callable[..., Path],
    workdir: Path,
    wait: Any,
) -> None:
    tick = script("tick.sh", "date +%s >> ticks.txt\n")
    created = _create(studio, command_schedule("every-second", tick, interval_sec=1))

    def two_completed() -> list[dict[str, Any]] | None:
        runs = _runs(studio, created["id"], status="completed")
        return runs if len(runs) >= 2 else None

    runs = wait(two_completed, timeout=30)
    assert all(r["exit_code"] == 0 for r in runs)
    assert len((workdir / "ticks.txt").read_text().split()) >= 2
    schedule = studio.client.get(f"/api/schedules/{created['id']}").json()
    assert schedule["last_fired_at"] is not None


def test_create_update_and_enable_wake_the_tick(
    serve: Callable[..., Any],
    command_schedule: Callable[..., Any],
    script: Callable[..., Path],
    wait: Any,
) -> None:
    # With a 30 s tick, a schedule due in 1 s runs long before the next tick only if the
    # change woke the engine (the API writes on the engine's own connection, so no
    # cross-process change detection can stand in for the wake).
    studio = serve(tick_seconds=30)
    ok = script("ok.sh", "exit 0\n")

    def fires_soon(schedule_id: str) -> None:
        started = time.monotonic()
        wait(lambda: _runs(studio, schedule_id), timeout=20)
        assert time.monotonic() - started < 20

    time.sleep(1.5)  # the first tick has passed: the loop now sleeps for ~30 s
    created = _create(studio, command_schedule("created", ok, interval_sec=1))
    fires_soon(created["id"])

    updated = _create(studio, command_schedule("updated", ok, interval_sec=3600))
    time.sleep(1.5)
    assert _runs(studio, updated["id"]) == []
    patched = studio.client.patch(f"/api/schedules/{updated['id']}", json={"interval_sec": 1})
    assert patched.status_code == 200
    fires_soon(updated["id"])

    enabled = _create(studio, {**command_schedule("enabled", ok, interval_sec=1), "enabled": False})
    time.sleep(1.5)
    assert _runs(studio, enabled["id"]) == []
    assert studio.client.post(f"/api/schedules/{enabled['id']}/enable").status_code == 200
    fires_soon(enabled["id"])


def test_shutdown_cancels_a_running_fire(
    alive: Callable[[int], bool],
    serve: Callable[..., Any],
    command_schedule: Callable[..., Any],
    script: Callable[..., Path],
    workdir: Path,
    wait: Any,
) -> None:
    studio = serve(max_scheduled_concurrent=1)
    slow = script("slow.sh", "sleep 60 &\necho $! > sleep.pid\nwait\n")
    created = _create(studio, command_schedule("slow", slow))
    run_id = studio.client.post(f"/api/schedules/{created['id']}/trigger").json()["run_id"]

    def running() -> dict[str, Any] | None:
        answer = studio.client.get(f"/api/schedules/runs/{run_id}")
        if answer.status_code != 200:
            return None
        run = answer.json()
        pid_file = workdir / "sleep.pid"
        ready = run["status"] == "running" and run["child_pid"] and pid_file.exists()
        return run if ready and pid_file.read_text().strip() else None

    run = wait(running)
    child_pid = int(run["child_pid"])
    sleep_pid = int((workdir / "sleep.pid").read_text())
    assert alive(child_pid) and alive(sleep_pid)

    # the slot is held: limits show it, and a second manual fire is refused with a reason
    limits = studio.client.get("/api/schedules/limits").json()
    assert limits["in_flight"] == 1
    assert [h["run_id"] for h in limits["holders"]] == [run_id]
    other = _create(studio, command_schedule("other", slow))
    refused = studio.client.post(f"/api/schedules/{other['id']}/trigger")
    assert refused.status_code == 409, refused.text
    assert refused.json()["reason_code"] == "schedule.deferred.capacity"
    health = studio.client.get("/api/health").json()["scheduler"]
    assert health["in_flight"] == 1

    studio.stop()

    rows = studio.db_rows(
        "SELECT status, status_reason_code, ended_at FROM schedule_runs WHERE id = ?", run_id
    )
    assert rows[0]["status"] == "cancelled"
    assert rows[0]["status_reason_code"] == "run.cancelled.shutdown"
    assert rows[0]["ended_at"] is not None
    wait(lambda: not alive(child_pid) and not alive(sleep_pid), timeout=10)


def test_a_second_server_on_the_same_database_refuses_to_start(
    studio: Any, make_settings: Callable[..., Any]
) -> None:
    second = StudioServer(make_settings(db=studio.settings.db), log_level="critical")
    with pytest.raises(RuntimeError, match="failed to start: another scheduler engine"):
        second.start()
    # the first one is unaffected
    assert studio.client.get("/api/health").json()["scheduler"]["running"] is True


def _clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIONAGI_", "GITHUB_TOKEN"))}
    env["HOME"] = str(home)
    env.update(extra)
    return env


def test_serve_on_a_fresh_machine_with_the_default_database(
    tmp_path: Path, port: int, wait: Any
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "studio_api"],
        env=_clean_env(home, LIONAGI_STUDIO_PORT=str(port)),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def healthy() -> dict[str, Any] | None:
            if proc.poll() is not None:
                raise AssertionError(f"server exited: {proc.communicate()}")
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2)
            except httpx.TransportError:
                return None
            return dict(answer.json()) if answer.status_code == 200 else None

        health = wait(healthy, timeout=60)
        assert health["scheduler"]["running"] is True
        assert (home / ".lionagi" / "studio" / "state.db").is_file()
        created = httpx.post(
            f"http://127.0.0.1:{port}/api/schedules",
            json={
                "name": "fresh",
                "trigger_type": "cron",
                "cron_expr": "0 0 * * *",
                "action_kind": "agent",
                "action_prompt": "hello",
                "action_cwd": str(tmp_path),
            },
            timeout=10,
        )
        assert created.status_code == 201, created.text
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_a_second_studio_process_says_why_it_cannot_start(studio: Any, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "studio_api"],
        env=_clean_env(
            tmp_path, LIONAGI_STUDIO_DB=str(studio.settings.db), LIONAGI_STUDIO_PORT="0"
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert f"pid {os.getpid()}" in result.stderr
    assert "studio cannot start: another scheduler engine" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"LIONAGI_STUDIO_PORT": "eighty"}, "LIONAGI_STUDIO_PORT: "),
        (
            {"LIONAGI_STUDIO_NOTIFY_TEMPLATE": "notify {payload}"},
            "LIONAGI_STUDIO_NOTIFY_TEMPLATE: ",
        ),
        ({"LIONAGI_STUDIO_HOST": "0.0.0.0"}, "LIONAGI_STUDIO_AUTH_TOKEN"),
    ],
)
def test_invalid_settings_stop_startup_with_a_message(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    expected: str,
) -> None:
    # the entry point of `python -m studio_api`, in process
    for name in list(os.environ):
        if name.startswith("LIONAGI_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LIONAGI_STUDIO_DB", str(tmp_path / "s.db"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert studio_main() == 2
    err = capsys.readouterr().err
    assert expected in err
    assert "Traceback" not in err
    assert not (tmp_path / "s.db").exists()


def test_health_names_the_configured_node(serve: Callable[..., Any]) -> None:
    studio = serve(node_id="studio-a")
    health = studio.client.get("/api/health").json()
    assert (health["node_id"], health["leader"], health["backend"]) == ("studio-a", True, "sqlite")
