"""``studio schedule plan|apply|export`` as real subprocesses on a real SQLite file: the plan's
lines and summary, ``--exit-code``, ``--json``, one transaction, the same files twice writing
nothing, refusals with one stderr line each and nothing written, export round-trip, and
``managed_by`` of a CLI create."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conftest import Studio

from studio_scheduler_core.testing import SET_HEADER, sample_set, set_document

ALLOW = {"LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": "echo"}


SET_A = sample_set("team-a", argv=("echo", "hi"), cwd=".")


def _rows(studio: Studio) -> list[tuple[str, ...]]:
    conn = sqlite3.connect(studio.db)
    try:
        return list(
            conn.execute(
                "SELECT name, managed_by, owner_key, set_member, interval_sec, enabled "
                "FROM schedules ORDER BY name"
            )
        )
    finally:
        conn.close()


def _transitions(studio: Studio) -> int:
    conn = sqlite3.connect(studio.db)
    try:
        return int(conn.execute("SELECT count(*) FROM status_transitions").fetchone()[0])
    finally:
        conn.close()


def test_plan_apply_and_the_same_files_again(tmp_path: Path) -> None:
    studio = Studio(tmp_path)
    folder = tmp_path / "sets"
    folder.mkdir()
    (folder / "a.yaml").write_text(SET_A)

    plan = studio.run("schedule", "plan", str(folder), "--exit-code", env=ALLOW, expect=2)
    assert plan.stdout.splitlines() == [
        "CREATE team-a/nightly",
        "CREATE team-a/hourly",
        "Plan: 2 to create, 0 to update, 0 to disable, 0 to delete, 0 errors.",
    ]
    assert _rows(studio) == []
    document = studio.ok_json("schedule", "plan", str(folder), env=ALLOW)
    assert document["owner"] == "team-a"
    assert [c["action"] for c in document["changes"]] == ["create", "create"]

    applied = studio.run("schedule", "apply", str(folder), env=ALLOW)
    assert applied.stdout.splitlines()[-1] == (
        "Applied: 2 created, 0 updated, 0 disabled, 0 deleted."
    )
    assert _rows(studio) == [
        ("team-a/hourly", "set", "team-a", "hourly", 3600, 1),
        ("team-a/nightly", "set", "team-a", "nightly", None, 1),
    ]
    before = _transitions(studio)
    again = studio.run("schedule", "apply", str(folder), env=ALLOW)
    assert again.stdout.splitlines()[-1] == "Applied: 0 created, 0 updated, 0 disabled, 0 deleted."
    assert _transitions(studio) == before
    quiet = studio.run("schedule", "plan", str(folder), "--exit-code", env=ALLOW)
    assert quiet.stdout.splitlines()[-1].startswith("Plan: 0 to create, 0 to update")

    hourly = "{trigger: {every: 2h}, command: {argv: [echo, hi], cwd: .}}"  # cwd as before
    (folder / "a.yaml").write_text(set_document("team-a", {"hourly": hourly}))
    changed = studio.run("schedule", "plan", str(folder), env=ALLOW)
    assert changed.stdout.splitlines() == [
        "UPDATE team-a/hourly: interval_sec 3600 -> 7200",
        "DISABLE team-a/nightly: absent from the documents (--prune deletes it)",
        "Plan: 0 to create, 1 to update, 1 to disable, 0 to delete, 0 errors.",
    ]
    studio.run("schedule", "apply", str(folder), env=ALLOW)
    assert [r[4:] for r in _rows(studio)] == [(7200, 1), (None, 0)]


def test_refusals_are_one_line_each_and_write_nothing(tmp_path: Path) -> None:
    studio = Studio(tmp_path)
    created = studio.ok_json(
        "schedule", "create", "team-a/hourly", "--interval", "1h", "--command", "echo", env=ALLOW
    )
    assert created["managed_by"] == "cli" and created["owner_key"] is None
    path = tmp_path / "a.yaml"
    path.write_text(SET_A)
    before = (_rows(studio), _transitions(studio))

    refused = studio.run("schedule", "apply", str(path), env=ALLOW, expect=1)
    errors = refused.stderr.splitlines()
    assert len(errors) == 1
    assert errors[0].startswith("ERROR team-a/hourly: the name is held by an unowned schedule")
    assert (_rows(studio), _transitions(studio)) == before

    bad = tmp_path / "bad.yaml"
    bad_name = "metadata: {name: team-b}\nschedules:\n  Bad Name: {trigger: {every: 1h}}\n"
    bad.write_text(f"{SET_HEADER}{bad_name}  ok: [\n")
    malformed = studio.run("schedule", "plan", str(bad), env=ALLOW, expect=1)
    assert malformed.stdout == ""
    (line,) = malformed.stderr.splitlines()
    assert line.startswith(f"{bad}:7:1: malformed YAML")
    bad.write_text(SET_HEADER + bad_name)
    named = studio.run("schedule", "apply", str(bad), env=ALLOW, expect=1)
    assert "member name 'Bad Name' must match" in named.stderr
    assert (_rows(studio), _transitions(studio)) == before


def test_export_writes_a_document_apply_accepts_unchanged(tmp_path: Path) -> None:
    studio = Studio(tmp_path)
    path = tmp_path / "a.yaml"
    path.write_text(SET_A)
    studio.run("schedule", "apply", str(path), env=ALLOW)
    out = tmp_path / "exported" / "team-a.yaml"
    out.parent.mkdir()
    studio.run("schedule", "export", "--owner", "team-a", "-o", str(out), env=ALLOW)
    assert "kind: ScheduleSet" in out.read_text()
    plan = studio.run("schedule", "plan", str(out), "--exit-code", env=ALLOW)
    assert plan.stdout.splitlines() == [
        "UNCHANGED team-a/nightly",
        "UNCHANGED team-a/hourly",
        "Plan: 0 to create, 0 to update, 0 to disable, 0 to delete, 0 errors.",
    ]
    usage = studio.run("schedule", "export", env=ALLOW, expect=1)
    assert "exactly one of --owner OWNER or --unowned" in usage.stderr


def test_an_update_of_a_set_owned_schedule_succeeds_and_warns(tmp_path: Path) -> None:
    studio = Studio(tmp_path)
    path = tmp_path / "a.yaml"
    path.write_text(SET_A)
    studio.run("schedule", "apply", str(path), env=ALLOW)
    updated = studio.run("schedule", "update", "team-a/hourly", "--interval", "2h", env=ALLOW)
    assert updated.stdout.startswith("Updated schedule ")
    assert "managed by schedule set 'team-a'" in updated.stderr
    shown = studio.ok_json("schedule", "show", "team-a/hourly", env=ALLOW)
    assert (shown["drifted"], shown["interval_sec"], shown["managed_by"]) == (True, 7200, "set")
    studio.run("schedule", "apply", str(path), env=ALLOW)
    restored = studio.ok_json("schedule", "show", "team-a/hourly", env=ALLOW)
    assert (restored["drifted"], restored["interval_sec"]) == (False, 3600)


def test_a_file_too_large_or_with_too_many_members_is_one_line(tmp_path: Path) -> None:
    studio = Studio(tmp_path)
    many = ", ".join(f"m{i}: {{}}" for i in range(10_001))
    crowded = tmp_path / "many.yaml"
    crowded.write_text(f"{SET_HEADER}metadata: {{name: team-c}}\nschedules: {{{many}}}\n")
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"#" * (10 * 1024 * 1024))
    for command in ("validate", "plan", "apply"):
        refused = studio.run("schedule", command, str(crowded), env=ALLOW, expect=1)
        assert refused.stderr.splitlines() == [
            f"{crowded}: schedules: holds 10001 members; a document holds at most 10000"
        ], command
        too_large = studio.run("schedule", command, str(huge), env=ALLOW, expect=1)
        assert too_large.stderr.splitlines() == [
            f"{huge}: is 10485760 bytes; a document must be smaller than 10485760"
        ], command
    assert _rows(studio) == []


def test_a_forced_prune_cancels_the_running_run_in_the_apply(tmp_path: Path) -> None:
    studio = Studio(tmp_path)
    path = tmp_path / "a.yaml"
    path.write_text(SET_A)
    studio.run("schedule", "apply", str(path), env=ALLOW)
    conn = sqlite3.connect(studio.db)
    try:
        conn.execute(
            "INSERT INTO schedule_runs (id, schedule_id, trigger_context, action_kind, "
            "action_args, status, fired_at, created_at) SELECT 'r1', id, '{}', 'command', '{}', "
            "'running', 1, 1 FROM schedules WHERE name = 'team-a/hourly'"
        )
        conn.commit()
    finally:
        conn.close()
    nightly = "{trigger: {cron: {expression: '0 3 * * *', timezone: Europe/Paris}}, "
    nightly += "command: {argv: [echo, hi], cwd: .}, retry: {max_attempts: 2, backoff_sec: 90s}}"
    path.write_text(set_document("team-a", {"nightly": nightly}))
    refused = studio.run("schedule", "apply", str(path), "--prune", env=ALLOW, expect=1)
    assert "--force cancels them" in refused.stderr
    forced = studio.run("schedule", "apply", str(path), "--prune", "--force", env=ALLOW)
    assert forced.stdout.splitlines()[-1] == (
        "Applied: 0 created, 0 updated, 0 disabled, 1 deleted. Cancelled running: r1."
    )
    conn = sqlite3.connect(studio.db)
    try:
        moves = conn.execute(
            "SELECT previous_status, status, actor FROM status_transitions WHERE entity_id = 'r1'"
        ).fetchall()
    finally:
        conn.close()
    assert moves == [("running", "cancelled", "set:team-a")]
    assert [r[0] for r in _rows(studio)] == ["team-a/nightly"]
