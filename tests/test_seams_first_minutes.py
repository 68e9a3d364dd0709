"""A new user's first minutes, without a browser, against a real `studio serve`.

``/docs`` references no host but the server; ``POST /api/schedules`` carries an example per
trigger and action kind in OpenAPI, each accepted as written; docs/reference.md's ``curl``
blocks each create what they say; no document names a development wave or says a feature is
"being added now".
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest

from studio_api.testing import ServeProcess
from studio_scheduler_core import ACTION_KINDS, TRIGGER_TYPES

ROOT = Path(__file__).resolve().parent.parent
#: The address the documents' examples use: `studio serve`'s default.
DOC_URL = "http://127.0.0.1:8765"
CURL_MARKER = "<!-- tested: curl -->"
_CURL_BLOCK = re.compile(r"^" + re.escape(CURL_MARKER) + r"\s*\n```sh\n(.*?)^```", re.M | re.S)
CURL_HINT = "the reference's curl examples need curl: run `apt-get install -y curl`"


@pytest.fixture
def studio(studio_process: Any) -> Iterator[ServeProcess]:
    # github_poll examples poll a closed loopback port, never GitHub
    server: ServeProcess = studio_process(
        env={"LIONAGI_STUDIO_GITHUB_API_URL": "http://127.0.0.1:9"}
    )
    server.start()
    yield server
    server.stop()


def kinds_of(body: dict[str, Any]) -> set[str]:
    """The trigger kind (``threshold`` for a threshold check) and action kind of a body."""
    trigger = "threshold" if body.get("threshold_config") else body["trigger_type"]
    return {f"trigger:{trigger}", f"action:{body['action_kind']}"}


EVERY_KIND = {f"trigger:{t}" for t in (*TRIGGER_TYPES, "threshold")} | {
    f"action:{k}" for k in ACTION_KINDS
}


# -- /docs ----------------------------------------------------------------------------------------
_ABSOLUTE = re.compile(r"""(?:https?:)?//[^\s"'<>)]+""")
_REFERENCE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url\s*:\s*["']([^"']+)["']""")


def test_docs_page_references_no_other_host(studio: ServeProcess) -> None:
    page = studio.request("GET", "/docs")
    assert page.status_code == 200
    html = page.text
    assert "swagger-ui" in html
    others = [u for u in _ABSOLUTE.findall(html) if urlsplit(u).hostname not in (None, "127.0.0.1")]
    assert others == [], f"/docs references other hosts: {others}"
    # every asset it names is served by the server itself
    references = [a or b for a, b in _REFERENCE.findall(html)]
    assert any(r.endswith("swagger-ui-bundle.js") for r in references), references
    for reference in references:
        target = urljoin(f"{studio.url}/docs", reference)
        assert urlsplit(target).hostname == "127.0.0.1", reference
        answer = studio.request("GET", urlsplit(target).path)
        assert answer.status_code == 200, f"{reference}: {answer.status_code}"
    # ReDoc's bundle always fetches a logo from a CDN: it is not served
    assert studio.request("GET", "/redoc").status_code == 404


# -- OpenAPI examples -----------------------------------------------------------------------------
def test_openapi_examples_cover_every_kind_and_are_accepted(studio: ServeProcess) -> None:
    document = studio.request("GET", "/openapi.json").json()
    body = document["paths"]["/api/schedules"]["post"]["requestBody"]
    examples = body["content"]["application/json"]["examples"]
    assert len(examples) >= 6
    covered = set().union(*(kinds_of(e["value"]) for e in examples.values()))
    assert covered >= EVERY_KIND, f"no example for {sorted(EVERY_KIND - covered)}"
    assert all(e.get("summary") for e in examples.values())
    schema = document["components"]["schemas"]["ScheduleCreate"]
    assert list(schema["examples"]) == [e["value"] for e in examples.values()]

    for name, example in examples.items():
        created = studio.request("POST", "/api/schedules", json=example["value"])
        assert created.status_code == 201, f"{name}: {created.status_code} {created.text}"
        stored = created.json()
        assert kinds_of(stored) == kinds_of(example["value"]), name
    listed = studio.request("GET", "/api/schedules", params={"limit": 100}).json()
    assert listed["total"] == len(examples)


# -- docs/reference.md's curl blocks --------------------------------------------------------------
def curl_blocks() -> list[str]:
    text = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    return _CURL_BLOCK.findall(text)


def curl_argv(block: str, url: str) -> list[str]:
    """The block's one command as an argv (continuations joined), aimed at ``url``."""
    argv = shlex.split(re.sub(r"\\\n\s*", " ", block.strip()))
    assert argv[0] == "curl", block
    return [word.replace(DOC_URL, url) for word in argv]


def test_reference_curls_create_each_kind(studio: ServeProcess) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.fail(CURL_HINT, pytrace=False)
    blocks = curl_blocks()
    assert len(blocks) >= 6
    covered: set[str] = set()
    for block in blocks:
        argv = curl_argv(block, studio.url)
        assert any(DOC_URL in word for word in curl_argv(block, DOC_URL)), block
        done = subprocess.run(
            [curl, *argv[1:]], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, f"{block}\nexit {done.returncode}: {done.stdout}{done.stderr}"
        stored = json.loads(done.stdout)
        sent = json.loads(argv[argv.index("-d") + 1])
        assert stored["name"] == sent["name"]
        [row] = studio.rows(
            "SELECT trigger_type, action_kind FROM schedules WHERE id = ?", (stored["id"],)
        )
        assert (row["trigger_type"], row["action_kind"]) == (
            sent["trigger_type"],
            sent["action_kind"],
        )
        covered |= kinds_of(stored)
    assert covered >= EVERY_KIND, f"no curl for {sorted(EVERY_KIND - covered)}"


def test_a_refused_curl_exits_non_zero_naming_the_field(studio: ServeProcess) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.fail(CURL_HINT, pytrace=False)
    argv = curl_argv(curl_blocks()[0], studio.url)
    sent = json.loads(argv[argv.index("-d") + 1])
    argv[argv.index("-d") + 1] = json.dumps({**sent, "cron_expr": "every day"})
    done = subprocess.run(
        [curl, *argv[1:]], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0
    assert json.loads(done.stdout)["field"] == "cron_expr"


# -- wording ---------------------------------------------------------------------------------------
#: Development-process words a user's document must not carry.
_STALE = re.compile(
    r"being added now|\bwave[- ]?\d|\bwave[- ]?(?:one|two|three)\b|\bthis wave\b", re.I
)


def user_documents() -> list[Path]:
    pages = [ROOT / "README.md", ROOT / "RELIABILITY.md", ROOT / "bench" / "README.md"]
    pages += sorted(ROOT.glob("docs/*.md"))
    return pages + sorted(ROOT.glob("packages/*/README.md"))


def test_no_document_names_a_wave_or_a_feature_being_added() -> None:
    found = []
    for page in user_documents():
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
            if _STALE.search(line):
                found.append(f"{page.relative_to(ROOT)}:{number}: {line.strip()}")
    assert len(user_documents()) >= 10
    assert found == [], "\n".join(found)


# -- how a run started ----------------------------------------------------------------------------
def test_a_manual_run_says_it_was_triggered_manually(studio: ServeProcess) -> None:
    body = {
        "name": "quiet",
        "trigger_type": "interval",
        "interval_sec": 3600,
        "action_kind": "command",
        "action_command": "python3",
        "action_command_args": ["-c", "import time; time.sleep(60)"],
    }
    created = studio.request("POST", "/api/schedules", json=body).json()
    run_id = studio.request("POST", f"/api/schedules/{created['id']}/trigger").json()["run_id"]
    run = studio.request("GET", f"/api/schedules/runs/{run_id}").json()
    assert run["status_reason_code"] == "schedule.fired.manual"
    assert run["status_reason_summary"] == "triggered manually by an operator"
    [fired] = studio.rows(
        "SELECT reason_summary FROM status_transitions WHERE entity_id = ? AND status = 'running'",
        (run_id,),
    )
    assert fired["reason_summary"] == "triggered manually by an operator"
    assert studio.request("POST", f"/api/schedules/runs/{run_id}/cancel").status_code == 202
