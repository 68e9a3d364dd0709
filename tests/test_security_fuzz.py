"""Schemathesis against the OpenAPI schema of a real `studio serve` process: no 500s.

Every operation gets schema-valid and schema-invalid requests (bounded examples each) with
auth on and a command allow-list of `true` only, so what the fuzzer creates may really run
(ad-hoc runs, manual triggers) without doing anything. No answer may be a 5xx other than a
documented 503, and the server log must show no traceback and no 500 afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from conftest import count
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from studio_api.testing import ServeProcess

pytestmark = pytest.mark.slow

TOKEN = "fuzz-token-0123456789"
MAX_EXAMPLES = 20
SENT: list[int] = []


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    base = tmp_path_factory.mktemp("fuzz")
    (base / "work").mkdir()
    server = ServeProcess(
        base,
        env={
            "LIONAGI_STUDIO_AUTH_TOKEN": TOKEN,
            "LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": "true",
            "LIONAGI_SCHEDULER_CWD": str(base / "work"),
            "LIONAGI_STUDIO_NOTIFY_TEMPLATE": '["true", "{payload}"]',
        },
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()
        server.close()


@pytest.fixture(scope="module")
def api_schema(served: ServeProcess) -> Any:
    return schemathesis.openapi.from_url(
        f"{served.url}/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )


def _operations(served_schema: Any) -> list[tuple[str, str]]:
    return sorted(
        (method.upper(), path)
        for path, operations in served_schema.raw_schema["paths"].items()
        for method in operations
    )


def test_no_input_is_a_server_error(api_schema: Any, served: ServeProcess) -> None:
    operations = _operations(api_schema)
    assert len(operations) >= 20  # the whole API, not a stub
    for method, path in operations:
        operation = api_schema[path][method]
        strategy = operation.as_strategy(GenerationMode.POSITIVE) | operation.as_strategy(
            GenerationMode.NEGATIVE
        )

        @given(case=strategy)
        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.generate],
        )
        def fuzz(case: Any) -> None:
            response = case.call(
                base_url=served.url,
                headers={"Authorization": f"Bearer {TOKEN}"},
                timeout=30,
            )
            SENT.append(response.status_code)
            if response.status_code == 503:  # documented: busy database, with Retry-After
                assert "retry-after" in {k.lower() for k in response.headers}
                return
            case.validate_response(response, checks=[not_a_server_error])

        fuzz()
    count("inputs_tried", len(SENT))
    assert len(SENT) >= len(operations)
    assert [code for code in SENT if code >= 500 and code != 503] == []


def test_the_server_logged_no_traceback_and_no_500(served: ServeProcess) -> None:
    # runs after the fuzzing above, on the same server
    log = served.log()
    assert SENT, "the fuzzer sent nothing"
    assert "Traceback" not in log
    assert '" 500 ' not in log
    assert served.health()["status"] in ("ok", "degraded")  # still serving
    assert Path(served.db).exists()
