"""Argv injection and path tricks against a real `studio serve`, and notify payloads.

Every action field (and a placeholder rendered from a hostile GitHub PR) gets flags, ``--``,
shell metacharacters, newlines, NUL bytes and huge values. Each attempt must be either
refused (422 naming the field, or a run failed with ``run.failed.invalid_action`` /
``run.failed.spawn_error`` before anything ran) or inert: the child received exactly the
argv of docs/reference.md with the value as one whole element in its slot, no shell ran, and the
canary file that the metacharacters try to create never appears. ``li`` is a stand-in that
records its argv (and the flow file it is given); command actions run a recorder too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import count, write_script

from studio_api.testing import ServeProcess
from studio_state.testing import wait_for

pytestmark = pytest.mark.slow

# Records its own argv (NUL-separated: any value survives), cwd and the flow file it is given,
# under $RECORDER_DIR/<invocation id>. sh, so that hundreds of runs stay cheap.
RECORDER = textwrap.dedent(
    """\
    #!/bin/sh
    out="$RECORDER_DIR/$LIONAGI_INVOCATION_ID"
    printf '%s\\0' "$0" "$@" > "$out.argv"
    pwd > "$out.cwd"
    prev=""
    for arg in "$@"; do
      if [ "$prev" = "-f" ]; then cat "$arg" > "$out.flow"; fi
      prev="$arg"
    done
    """
)
REFUSED_AT_LAUNCH = {"run.failed.invalid_action", "run.failed.spawn_error"}


def hostile(canary: Path) -> list[str]:
    return [
        # flags and the end-of-options marker
        "--help",
        "-rf",
        "--",
        "-",
        "--model=evil",
        "-c",
        "--project=/etc",
        "--invocation=x",
        # shell metacharacters (each would create the canary if a shell ever saw it)
        f"; touch {canary}",
        f"$(touch {canary})",
        f"`touch {canary}`",
        f"| touch {canary}",
        f"&& touch {canary}",
        f"> {canary}",
        "'\"\\",
        "*",
        "~root",
        "$HOME",
        "%s%n",
        # control characters
        "line1\nline2",
        "ok\n--help",
        "\r\n",
        "tab\there",
        "nul\x00byte",
        "\x1b[31mred",
        # path-looking and placeholder-looking values
        "../../../../etc/passwd",
        "{{pr_title}}",
        "{{ fired_at }}",
        # huge values: over the per-argument limit, at it, and multi-byte over it
        "A" * 200_000,
        "A" * 131_071,
        "é" * 70_000,
    ]


# kind -> (base action, fields to attack)
CASES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "agent": (
        {"action_kind": "agent", "action_model": "m1", "action_prompt": "hello"},
        ("action_model", "action_prompt", "action_agent", "action_project", "action_extra_args"),
    ),
    "flow": (
        {"action_kind": "flow", "action_model": "m1", "action_prompt": "hello"},
        ("action_model", "action_prompt"),
    ),
    "play": (
        {"action_kind": "play", "action_playbook": "pb"},
        ("action_playbook", "action_prompt", "action_extra_args"),
    ),
    "flow_yaml": (
        {"action_kind": "flow_yaml", "action_flow_yaml": "a: 1\n"},
        ("action_flow_yaml",),
    ),
    "command": (
        {"action_kind": "command", "action_command": "sh"},
        ("action_command", "action_command_args"),
    ),
}


def expected_argv(li: str, action: dict[str, Any], recorder: str) -> list[str] | None:
    """The documented argv for an action (None: flow_yaml, whose file name is random)."""
    kind = action["action_kind"]
    extra = list(action.get("action_extra_args") or [])
    if kind == "agent":
        argv = [li, "agent"]
        if action.get("action_agent"):
            argv += ["--agent", action["action_agent"]]
        if action.get("action_project"):
            argv += ["--project", action["action_project"]]
        model = [action["action_model"]] if action.get("action_model") else []
        return [*argv, "--", *model, action["action_prompt"], *extra]
    if kind == "flow":
        return [li, "o", "flow", "--", action["action_model"], action["action_prompt"], *extra]
    if kind == "play":
        prompt = [action["action_prompt"]] if action.get("action_prompt") else []
        return [li, "play", action["action_playbook"], *prompt, *extra]
    if kind == "command":
        return [action["action_command"], recorder, *action.get("action_command_args", [])[1:]]
    return None


def attack(base: dict[str, Any], field: str, value: str, recorder: str) -> dict[str, Any]:
    action = dict(base)
    if field == "action_extra_args":
        action[field] = [value]
    elif field == "action_command_args":
        action[field] = [recorder, value]
    elif field == "action_flow_yaml":
        action[field] = f"task: {json.dumps(value)}\n"
    else:
        action[field] = value
    if action["action_kind"] == "command" and field != "action_command_args":
        action["action_command_args"] = [recorder]
    return action


class Recorded:
    """What the recorder wrote, per invocation id."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __contains__(self, invocation_id: object) -> bool:
        return (self.directory / f"{invocation_id}.argv").exists()

    def __getitem__(self, invocation_id: str) -> dict[str, Any]:
        base = self.directory / invocation_id
        raw = Path(f"{base}.argv").read_bytes().decode()
        entry: dict[str, Any] = {
            "argv": raw.split("\0")[:-1],
            "cwd": Path(f"{base}.cwd").read_text().rstrip("\n"),
        }
        flow = Path(f"{base}.flow")
        if flow.exists():
            entry["flow_file"] = flow.read_text()
        return entry

    def entries(self) -> Recorded:
        return self


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("argv")
    recorder = write_script(base, "recorder.sh", RECORDER)
    li = write_script(base, "li", RECORDER)
    (base / "recorded").mkdir()
    github = _FakeGithub()
    server = ServeProcess(
        base,
        env={
            "LIONAGI_LI_EXECUTABLE": str(li),
            "RECORDER_DIR": str(base / "recorded"),
            "LIONAGI_STUDIO_MAX_ADHOC_CONCURRENT": "8",
            "LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT": "8",
            "LIONAGI_STUDIO_GITHUB_API_URL": github.url,
        },
    )
    server.start()
    try:
        yield {
            "server": server,
            "base": base,
            "li": str(li),
            "recorder": str(recorder),
            "recorded": Recorded(base / "recorded"),
            "canary": base / "canary",
            "github": github,
        }
    finally:
        server.stop()
        server.close()
        github.close()
        assert "Traceback" not in server.all_logs()


def _refusal_names_field(answer: Any, field: str) -> bool:
    body = answer.json()
    return field in str(body.get("field", "")) or field in str(body.get("detail", ""))


def test_every_action_field_refuses_or_neutralises_hostile_values(served: dict[str, Any]) -> None:
    server: ServeProcess = served["server"]
    canary: Path = served["canary"]
    recorder = served["recorder"]
    attempts: list[tuple[str, str, str, dict[str, Any], str | None]] = []
    refused_up_front = 0
    for kind, (base, fields) in CASES.items():
        for field in fields:
            for value in hostile(canary):
                action = attack(base, field, value, recorder)
                action["action_cwd"] = str(served["base"])
                answer = server.request("POST", "/api/runs", json=action)
                if answer.status_code == 422:
                    assert _refusal_names_field(answer, field), (kind, field, answer.text)
                    refused_up_front += 1
                    attempts.append((kind, field, value, action, None))
                    continue
                assert answer.status_code == 202, (kind, field, repr(value[:40]), answer.text)
                attempts.append((kind, field, value, action, answer.json()["run_id"]))
    count("inputs_tried", len(attempts))
    run_ids = [a[4] for a in attempts if a[4]]
    assert run_ids, "every attempt was refused: the inert path was never exercised"

    def finished() -> dict[str, dict[str, Any]] | None:
        rows = {
            r["id"]: r
            for r in server.rows(
                f"SELECT * FROM schedule_runs WHERE id IN ({','.join('?' * len(run_ids))})",
                tuple(run_ids),
            )
        }
        done = all(r["status"] not in ("queued", "running") for r in rows.values())
        return rows if done and len(rows) == len(run_ids) else None

    rows = wait_for(finished, timeout=120, what="every accepted run finished")
    recorded = served["recorded"].entries()
    inert = refused_at_launch = 0
    for kind, field, value, action, run_id in attempts:
        if run_id is None:
            continue
        row = rows[run_id]
        where = (kind, field, repr(value[:40]), row["status"], row["status_reason_code"])
        if row["status"] == "failed" and row["status_reason_code"] in REFUSED_AT_LAUNCH:
            assert row["invocation_id"] not in recorded, where  # nothing ran
            refused_at_launch += 1
            continue
        assert row["status"] == "completed", where
        entry = recorded[row["invocation_id"]]
        # command: sh runs the recorder (its first argument); else the recorder is li
        argv = [action["action_command"], *entry["argv"]] if kind == "command" else entry["argv"]
        want = expected_argv(served["li"], action, recorder)
        if want is None:  # flow_yaml: the value reaches li only inside the 0600 file
            assert argv[:4] == [served["li"], "o", "flow", "-f"] and argv[-1] == "--", where
            assert entry["flow_file"] == action["action_flow_yaml"], where
        else:
            assert argv == want, where
        inert += 1
    assert not canary.exists(), "a shell interpreted a value"
    count("inputs_refused", refused_up_front + refused_at_launch)
    count("inputs_inert", inert)
    assert inert and refused_up_front  # both outcomes really happened


def test_cwd_path_tricks_are_refused_or_exact(served: dict[str, Any], tmp_path: Path) -> None:
    server: ServeProcess = served["server"]
    recorder = served["recorder"]
    target = tmp_path / "real"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "missing")
    refused = [
        "relative/dir",
        "..",
        ".",
        "",
        "-rf",
        "--cwd=/",
        "~",
        "/nonexistent-dir-xyz",
        str(a_file),
        str(dangling),
        f"{target}\x00/etc",
        f"{target}\n/etc",
    ]
    for cwd in refused:
        answer = server.request(
            "POST",
            "/api/runs",
            json={
                "action_kind": "command",
                "action_command": "sh",
                "action_command_args": [recorder],
                "action_cwd": cwd,
            },
        )
        assert answer.status_code == 422, (cwd, answer.text)
        assert _refusal_names_field(answer, "action_cwd"), answer.text
    accepted = {str(link): target, f"{tmp_path}/real/../real": target, str(target) + "/": target}
    ids = {}
    for cwd in accepted:
        answer = server.request(
            "POST",
            "/api/runs",
            json={
                "action_kind": "command",
                "action_command": "sh",
                "action_command_args": [recorder],
                "action_cwd": cwd,
            },
        )
        assert answer.status_code == 202, (cwd, answer.text)
        ids[cwd] = answer.json()["run_id"]
    # A directory that disappears after creation fails the run: it never runs elsewhere.
    doomed = tmp_path / "doomed"
    doomed.mkdir()
    created = server.request(
        "POST",
        "/api/schedules",
        json={
            "name": "doomed-cwd",
            "trigger_type": "interval",
            "interval_sec": 3600,
            "action_kind": "command",
            "action_command": "sh",
            "action_command_args": [recorder],
            "action_cwd": str(doomed),
        },
    )
    assert created.status_code == 201, created.text
    doomed.rmdir()
    fired = server.request("POST", f"/api/schedules/{created.json()['id']}/trigger")
    assert fired.status_code == 202, fired.text
    ids["doomed"] = fired.json()["run_id"]

    def rows() -> dict[str, dict[str, Any]] | None:
        found = {
            key: server.rows("SELECT * FROM schedule_runs WHERE id = ?", (run_id,))[0]
            for key, run_id in ids.items()
        }
        return (
            found if all(r["status"] not in ("queued", "running") for r in found.values()) else None
        )

    done = wait_for(rows, timeout=60, what="the cwd runs finished")
    recorded = served["recorded"].entries()
    for cwd, real in accepted.items():
        row = done[cwd]
        assert row["status"] == "completed", row
        assert os.path.realpath(recorded[row["invocation_id"]]["cwd"]) == str(real.resolve())
    assert done["doomed"]["status"] == "failed"
    assert done["doomed"]["status_reason_code"] == "run.failed.missing_cwd"
    assert done["doomed"]["invocation_id"] not in recorded
    count("inputs_tried", len(refused) + len(accepted) + 1)


def test_cli_cwd_path_tricks(served: dict[str, Any], tmp_path: Path) -> None:
    server: ServeProcess = served["server"]
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    env = dict(server.env)
    tried = 0
    for n, cwd in enumerate(["missing/relative", "-rf", str(a_file), "/no\nsuch", "--", ".."]):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "studio_cli",
                "schedule",
                "create",
                f"cli-cwd-{n}",
                "--interval",
                "60",
                "--command",
                "python3",
                "--command-arg",
                "x",
                f"--cwd={cwd}",
                "--db",
                str(server.db),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=60,
        )
        tried += 1
        if cwd == "..":  # an existing directory: stored as the absolute path it names
            assert result.returncode == 0, result.stderr
            continue
        assert result.returncode in (1, 2), (cwd, result.stdout, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (cwd, result.stderr)
        assert "--cwd" in lines[0] or "cwd" in lines[0], lines
        assert "Traceback" not in result.stderr
    stored = {
        r["name"]: r["action_cwd"]
        for r in server.rows("SELECT name, action_cwd FROM schedules WHERE name LIKE 'cli-cwd-%'")
    }
    assert stored == {"cli-cwd-5": str(tmp_path.parent.resolve())}
    count("inputs_tried", tried)


# -- placeholders rendered from a hostile GitHub ----------------------------------------------
class _FakeGithub:
    """Serves one page of pull requests whose titles are hostile (set by the test)."""

    def __init__(self) -> None:
        self.pulls: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                body = json.dumps(outer.pulls).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_placeholders_from_a_hostile_pull_request_stay_inert(served: dict[str, Any]) -> None:
    server: ServeProcess = served["server"]
    canary: Path = served["canary"]
    recorder = served["recorder"]
    titles = [
        "--help",
        "-rf /",
        f"; touch {canary}",
        f"$(touch {canary})",
        "fix\n--upload-pack=x",
        "nul\x00byte",
        "A" * 200_000,
        "plain title",
    ]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 5))
    served["github"].pulls = [
        {
            "number": n + 1,
            "title": title,
            "updated_at": now,
            "created_at": now,
            "state": "open",
            "head": {"ref": "-x", "repo": {"id": 1}},
            "base": {"ref": "main", "repo": {"id": 1}},
        }
        for n, title in enumerate(titles)
    ]
    schedules = {
        "gh-command": {
            "action_kind": "command",
            "action_command": "sh",
            "action_command_args": [recorder, "{{pr_title}}"],
        },
        "gh-agent": {
            "action_kind": "agent",
            "action_model": "m1",
            "action_prompt": "review {{pr_title}} from {{head_ref}}",
        },
    }
    ids = {}
    for name, action in schedules.items():
        created = server.request(
            "POST",
            "/api/schedules",
            json={
                "name": name,
                "trigger_type": "github_poll",
                "github_repo": "o/r",
                "poll_interval_sec": 3600,
                "overlap_policy": "allow",
                "action_cwd": str(served["base"]),
                **action,
            },
        )
        assert created.status_code == 201, created.text
        ids[name] = created.json()["id"]

    def runs() -> list[dict[str, Any]] | None:
        rows = server.rows(
            f"SELECT * FROM schedule_runs WHERE schedule_id IN ({','.join('?' * len(ids))}) "
            "AND status != 'skipped'",
            tuple(ids.values()),
        )
        done = len(rows) == len(titles) * len(ids) and all(
            r["status"] not in ("queued", "running") for r in rows
        )
        return rows if done else None

    rows = wait_for(runs, timeout=90, what="one run per PR and schedule")
    recorded = served["recorded"].entries()
    by_schedule = {v: k for k, v in ids.items()}
    for row in rows:
        title = json.loads(row["trigger_context"])["github_events"][0]["pr_title"]
        name = by_schedule[row["schedule_id"]]
        where = (name, repr(title[:30]), row["status"], row["status_reason_code"])
        if row["status"] == "failed" and row["status_reason_code"] in REFUSED_AT_LAUNCH:
            assert row["invocation_id"] not in recorded, where
            # only values that cannot be inert are refused
            assert title.startswith("-") or "\x00" in title or len(title) > 100_000, where
            continue
        assert row["status"] == "completed", where
        argv = recorded[row["invocation_id"]]["argv"]
        if name == "gh-command":
            assert argv == [recorder, title], where
        else:
            assert argv == [served["li"], "agent", "--", "m1", f"review {title} from -x"], where
    assert not canary.exists()
    count("inputs_tried", len(rows))


# -- the notify transport ---------------------------------------------------------------------
NOTIFY_RECORDER = textwrap.dedent(
    """
    import json, os, sys
    entry = {"argv": sys.argv[1:], "stdin": sys.stdin.read()}
    with open(os.environ["NOTIFY_LOG"], "a") as handle:
        handle.write(json.dumps(entry) + "\\n")
    """
)


@pytest.mark.parametrize("payload_in", ["argv", "stdin"])
async def test_notify_payloads_with_metacharacters_stay_inert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, payload_in: str
) -> None:
    import studio_outbox
    import studio_state

    canary = tmp_path / "canary"
    log = tmp_path / "notify.jsonl"
    monkeypatch.setenv("NOTIFY_LOG", str(log))
    script = write_script(tmp_path, "notify.py", NOTIFY_RECORDER)
    template = [sys.executable, str(script), "--to", "{deliver_to}"]
    if payload_in == "argv":
        template.append("{payload}")
    # (NUL and values past the per-argument limit cannot be argv elements: below)
    values = [v for v in hostile(canary) if "\x00" not in v and len(v.encode()) < 60_000]
    sent: dict[str, tuple[str, dict[str, Any]]] = {}
    async with studio_state.connect(tmp_path / "outbox.db") as conn:
        await studio_outbox.ensure_schema(conn)
        for n, value in enumerate(values):
            body = {"text": value, "nested": {"v": [value, "\x00nul inside JSON"]}}
            dispatch_id = await studio_outbox.enqueue_dispatch(
                conn,
                kind="alert",
                deliver_to=value if value.strip() else "x",
                body=body,
                dedup_key=f"n{n}",
            )
            sent[dispatch_id] = (value if value.strip() else "x", body)
        # NUL cannot be an argv element: refused when enqueued, naming the field
        with pytest.raises(studio_outbox.InvalidDispatch, match="deliver_to"):
            await studio_outbox.enqueue_dispatch(conn, kind="alert", deliver_to="a\x00b")
        counts = {"delivered": 0}
        while counts["delivered"] < len(sent):
            step = await studio_outbox.deliver_due_dispatches(
                conn, notify_template=template, concurrency=4, limit=500
            )
            assert step["retried"] == 0 and step["dead_letter"] == 0, step
            counts["delivered"] += step["delivered"]
        # a value too large for one argv element fails the send with the reason, no crash
        huge = await studio_outbox.enqueue_dispatch(
            conn, kind="alert", deliver_to="A" * 200_000, body={"n": 1}
        )
        step = await studio_outbox.deliver_due_dispatches(conn, notify_template=template)
        assert step["retried"] == 1, step
        row = await studio_outbox.get_dispatch(conn, huge)
        assert row is not None and row["status"] == "pending"
        assert "Argument list too long" in (row["last_error"] or "")
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(entries) == len(sent)
    for entry in entries:
        argv = entry["argv"]
        assert argv[0] == "--to"
        payload = json.loads(argv[2] if payload_in == "argv" else entry["stdin"])
        deliver_to, body = sent[payload["dispatch_id"]]
        assert argv[1] == deliver_to  # one whole element, whatever it holds
        assert len(argv) == (3 if payload_in == "argv" else 2)
        assert payload["body"] == body
    assert not canary.exists()
    count("inputs_tried", len(sent) + 2)
