"""/metrics scraped from a real server and parsed; JSON event lines from `python -m studio_api`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

SERIES = {
    "studio_fires_total",
    "studio_runs_in_flight",
    "studio_fire_lag_seconds",
    "studio_run_duration_seconds",
    "studio_deferrals_total",
    "studio_dispatch_rows",
    "studio_deliveries_total",
    "studio_tick_seconds",
    "studio_github_poll_healthy_age_seconds",
}


def _families(text: str) -> dict[str, Any]:
    # the parser names a counter's family without its `_total` suffix; key by the series name
    return {
        f"{f.name}_total" if f.type == "counter" else f.name: f
        for f in text_string_to_metric_families(text)
    }


def _value(family: Any, name: str, **labels: str) -> float | None:
    for sample in family.samples:
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
            return float(sample.value)
    return None


def test_metrics_scraped_from_a_served_studio(
    serve: Callable[..., Any],
    command_schedule: Callable[..., dict[str, Any]],
    script: Callable[[str, str], Path],
    wait: Any,
) -> None:
    studio = serve(max_scheduled_concurrent=1)
    ok = script("ok.sh", "exit 0\n")
    bad = script("bad.sh", "exit 3\n")
    for name, path in (("ok", ok), ("bad", bad)):
        created = studio.client.post("/api/schedules", json=command_schedule(name, path))
        assert created.status_code == 201, created.text
        run_id = studio.client.post(f"/api/schedules/{created.json()['id']}/trigger").json()[
            "run_id"
        ]
        wait(
            lambda rid=run_id: (
                studio.client.get(f"/api/schedules/runs/{rid}").json()["status"]
                in ("completed", "failed")
            )
        )
    response = studio.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = _families(response.text)
    assert set(families) >= SERIES, SERIES - set(families)
    fires = families["studio_fires_total"]
    assert _value(fires, "studio_fires_total", outcome="completed") == 1
    assert _value(fires, "studio_fires_total", outcome="failed") == 1
    duration = families["studio_run_duration_seconds"]
    assert _value(duration, "studio_run_duration_seconds_count") == 2
    ticks = families["studio_tick_seconds"]
    assert (_value(ticks, "studio_tick_seconds_count") or 0) >= 1
    assert "studio_coalesced_slots_total" in families
    lag = families["studio_scheduling_lag_seconds"]
    assert _value(lag, "studio_scheduling_lag_seconds") == 0.0
    health = studio.client.get("/api/health").json()["scheduler"]
    assert "fire_lag_last_seconds" in health and "fire_lag_max_seconds" in health
    assert (health["scheduling_lag_seconds"], health["coalesced_slots"]) == (0.0, 0)
    in_flight = families["studio_runs_in_flight"]
    assert _value(in_flight, "studio_runs_in_flight", kind="scheduled") == 0


def test_metrics_behind_the_token_unless_public(serve: Callable[..., Any], tmp_path: Path) -> None:
    guarded = serve(auth_token="t0ken")
    assert httpx.get(f"{guarded.server.base_url}/metrics").status_code == 401
    assert guarded.client.get("/metrics").status_code == 200
    guarded.stop()
    public = serve(auth_token="t0ken", metrics_public=True, db=tmp_path / "public.db")
    assert httpx.get(f"{public.server.base_url}/metrics").status_code == 200
    assert httpx.get(f"{public.server.base_url}/api/schedules").status_code == 401


def _studio_env(tmp_path: Path, port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIONAGI_")}
    env.update(
        LIONAGI_STUDIO_DB=str(tmp_path / "s" / "state.db"),
        LIONAGI_STUDIO_PORT=str(port),
        LIONAGI_STUDIO_TICK_SECONDS="1",
        **extra,
    )
    return env


def test_json_log_lines_carry_the_event(tmp_path: Path, port: int) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "studio_api"],
        env=_studio_env(tmp_path, port, LIONAGI_STUDIO_LOG_FORMAT="json"),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    ) as proc:
        _read_recovery(proc)


def _read_recovery(proc: subprocess.Popen[str]) -> None:
    try:
        deadline = time.monotonic() + 30
        found: dict[str, Any] | None = None
        assert proc.stderr is not None
        while found is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            record = json.loads(line)  # every line is one JSON object
            if record.get("event") == "recovery":
                found = record
        assert found is not None
        assert found["message"].startswith("recovered 0 runs, killed 0 orphans")
        assert found["recovered"] == 0 and found["level"] == "INFO"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_invalid_log_format_refuses_startup_naming_the_variable(tmp_path: Path, port: int) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "studio_api"],
        env=_studio_env(tmp_path, port, LIONAGI_STUDIO_LOG_FORMAT="yaml"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "LIONAGI_STUDIO_LOG_FORMAT" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "s" / "state.db").exists()
