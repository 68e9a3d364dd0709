"""What the dashboard's pages show, over HTTP: readable durations, argv, times, links."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any


def test_lists_read_as_a_person_reads_them(
    studio: Any, command_schedule: Callable[..., dict[str, Any]], wait: Callable[..., Any]
) -> None:
    body = command_schedule(
        "readable",
        action_command="python3",
        action_command_args=["-c", "print('a b')"],
        timezone="Asia/Tokyo",
    )
    made = studio.client.post("/api/schedules", json=body).json()
    run_id = studio.client.post(f"/api/schedules/{made['id']}/trigger").json()["run_id"]
    wait(lambda: studio.client.get(f"/api/schedules/runs/{run_id}").json()["status"] == "completed")

    listing = studio.client.get("/schedules").text
    assert "every 1 h 00 min" in listing and "3600 s" not in listing

    page = studio.client.get(f"/schedules/{made['id']}").text
    # each argument on its own (no shell joins them): the argv as the child gets it
    assert "<code>python3</code> <code>-c</code> <code>print(&#39;a b&#39;)</code>" in page
    # times in the schedule's zone, with UTC on hover
    times = re.findall(r'<time datetime="[^"]+" title="([^"]+)">([^<]+)</time>', page)
    assert len(times) >= 10
    assert all(title.endswith("Z UTC") and shown.endswith(" JST") for title, shown in times)

    dispatch = {"kind": "report", "deliver_to": "ops", "schedule_run_id": run_id}
    assert studio.client.post("/api/dispatch", json=dispatch).status_code == 201
    rows = studio.client.get("/dispatch").text
    assert f'href="/runs/{run_id}"' in rows  # the run a dispatch is about links to its page
    assert "due now" in rows  # no notify template here: the row waits, due
