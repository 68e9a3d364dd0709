"""The dispatch routes and `studio dispatch` on a PostgreSQL URL.

A real Studio app (uvicorn on loopback, its engine) on a throwaway cluster: dispatches are
enqueued, listed, paged, read, delivered and acknowledged through the API, and the CLI lists
and reads the same rows on the same URL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from studio_api import StudioSettings
from studio_api.testing import StudioServer
from studio_state.testing import free_port, wait_for


@pytest.fixture
def node(pg_dsn: str, tmp_path: Path) -> Iterator[str]:
    receipts = tmp_path / "receipts"
    receipts.mkdir()
    settings = StudioSettings.from_env(
        {},
        db=pg_dsn,
        port=free_port(),
        node_id="solo",
        run_log_dir=tmp_path / "runs",
        tick_seconds=0.5,
        # each send writes the payload into receipts/<deliver_to>
        notify_template=(
            sys.executable,
            "-c",
            "import sys, pathlib; pathlib.Path(sys.argv[1], sys.argv[2]).write_text(sys.argv[3])",
            str(receipts),
            "{deliver_to}",
            "{payload}",
        ),
    )
    server = StudioServer(settings)
    server.start()
    try:
        yield server.base_url
    finally:
        server.stop()


def _cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "studio_cli", *args, "--db", dsn],
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_dispatch_routes_and_cli_on_postgresql(pg_dsn: str, node: str, tmp_path: Path) -> None:
    first = httpx.post(
        f"{node}/api/dispatch", json={"kind": "k", "deliver_to": "a", "body": {"n": 1}}
    )
    assert first.status_code == 201, first.text
    keyed = {"kind": "k", "deliver_to": "b", "dedup_key": "once", "ack_required": True}
    second = httpx.post(f"{node}/api/dispatch", json=keyed)
    assert second.status_code == 201
    again = httpx.post(f"{node}/api/dispatch", json=keyed)
    assert again.status_code == 200
    assert again.json() == {"id": second.json()["id"], "created": False}
    bad = httpx.post(f"{node}/api/dispatch", json={"kind": "k"})
    assert bad.status_code == 422

    receipts = tmp_path / "receipts"
    wait_for(lambda: (receipts / "a").exists() and (receipts / "b").exists(), 30)
    sent = json.loads((receipts / "b").read_text())
    listed = httpx.get(f"{node}/api/dispatch").json()
    ids = [row["id"] for row in listed["dispatches"]]
    assert ids == [second.json()["id"], first.json()["id"]]
    acked = httpx.post(
        f"{node}/api/dispatch/{second.json()['id']}/ack", json={"token": sent["ack_token"]}
    )
    assert acked.status_code == 200 and acked.json()["status"] == "acked"
    one = httpx.get(f"{node}/api/dispatch/{first.json()['id']}").json()
    assert one["status"] == "delivered" and one["payload"]["body"] == {"n": 1}
    assert httpx.get(f"{node}/api/dispatch/nosuch").status_code == 404

    shown = _cli(pg_dsn, "dispatch", "list", "--json")
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)
    rows = rows["dispatches"] if isinstance(rows, dict) else rows
    assert {row["id"]: row["status"] for row in rows} == {
        first.json()["id"]: "delivered",
        second.json()["id"]: "acked",
    }
