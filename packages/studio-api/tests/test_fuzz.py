"""Property-based fuzzing of the served API from its own OpenAPI schema: no input is a 500.

Schemathesis generates valid and invalid requests for every operation (bounded examples per
operation) and sends them to the real app on uvicorn; each answer must be no 5xx, a status the
schema documents, and a body that matches the documented model.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from studio_api import StudioSettings
from studio_api.testing import StudioServer

TOKEN = "fuzz-token-0123456789"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def error_log() -> Iterator[list[logging.LogRecord]]:
    """ERROR records of the studio_api logger (the last-resort 500 handler logs there)."""
    handler = _Collect()
    logger = logging.getLogger("studio_api")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


@pytest.fixture(scope="module")
def fuzz_server(
    tmp_path_factory: pytest.TempPathFactory, error_log: list[logging.LogRecord]
) -> Iterator[StudioServer]:
    base = tmp_path_factory.mktemp("fuzz")
    (base / "work").mkdir()
    # Auth on, so the schema under test is the protected one; an empty allow-list, so nothing
    # the fuzzer creates can run a command (agent fires fail to find `li`).
    studio_settings = StudioSettings.from_env(
        {},
        db=base / "state.db",
        port=0,
        tick_seconds=1,
        default_cwd=str(base / "work"),
        auth_token=TOKEN,
    )
    server = StudioServer(studio_settings)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def api_schema(fuzz_server: StudioServer) -> Any:
    schema = schemathesis.openapi.from_url(
        f"{fuzz_server.base_url}/openapi.json",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
    )
    return schema


OPERATIONS = [
    ("GET", "/api/health"),
    ("GET", "/api/schedules"),
    ("POST", "/api/schedules"),
    ("GET", "/api/schedules/limits"),
    ("GET", "/api/schedules/runs/{run_id}"),
    ("GET", "/api/schedules/runs/{run_id}/log"),
    ("GET", "/api/schedules/runs/{run_id}/log/stream"),
    ("POST", "/api/schedules/runs/{run_id}/cancel"),
    ("GET", "/api/schedules/{schedule_id}"),
    ("PATCH", "/api/schedules/{schedule_id}"),
    ("DELETE", "/api/schedules/{schedule_id}"),
    ("POST", "/api/schedules/{schedule_id}/enable"),
    ("POST", "/api/schedules/{schedule_id}/disable"),
    ("POST", "/api/schedules/{schedule_id}/trigger"),
    ("GET", "/api/schedules/{schedule_id}/runs"),
    ("GET", "/api/schedules/{schedule_id}/preview"),
    ("GET", "/api/schedules/{schedule_id}/status"),
    ("POST", "/api/schedules/{schedule_id}/backfill"),
    ("POST", "/api/runs"),
    ("GET", "/api/runs"),
    ("GET", "/api/runs/{run_id}"),
    ("DELETE", "/api/runs/{run_id}"),
    ("POST", "/api/runs/{run_id}/cancel"),
    ("POST", "/api/dispatch"),
    ("GET", "/api/dispatch"),
    ("GET", "/api/dispatch/{dispatch_id}"),
    ("DELETE", "/api/dispatch/{dispatch_id}"),
    ("POST", "/api/dispatch/{dispatch_id}/ack"),
    ("POST", "/api/dispatch/{dispatch_id}/retry"),
    ("GET", "/api/audit"),
    ("POST", "/api/admin/maintenance"),
    ("GET", "/api/stats/activity"),
    ("GET", "/api/stats/spend"),
    ("POST", "/api/schedule-sets/plan"),
    ("POST", "/api/schedule-sets/apply"),
    ("GET", "/api/tokens"),
    ("POST", "/api/tokens"),
    ("DELETE", "/api/tokens/{name}"),
]
MAX_EXAMPLES = 25


# Schemathesis's own pytest integration does not work with the pytest in use (it reads a
# private node attribute that pytest removed), so each operation's schemathesis strategies
# (schema-valid and schema-invalid requests) drive a plain Hypothesis test instead.
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_no_input_is_a_server_error(
    api_schema: Any, fuzz_server: StudioServer, method: str, path: str
) -> None:
    operation = api_schema[path][method]
    strategy = operation.as_strategy(GenerationMode.POSITIVE) | operation.as_strategy(
        GenerationMode.NEGATIVE
    )
    sent: list[int] = []

    @given(case=strategy)
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )
    def fuzz(case: Any) -> None:
        response = case.call_and_validate(
            base_url=fuzz_server.base_url,
            headers={"Authorization": f"Bearer {TOKEN}"},
            checks=CHECKS,
            timeout=30,
        )
        sent.append(response.status_code)

    fuzz()
    assert sent, "no request was sent"
    assert all(code < 500 for code in sent)


def test_the_fuzzer_reaches_every_route(api_schema: Any) -> None:
    served = {
        (method.upper(), path)
        for path, operations in api_schema.raw_schema["paths"].items()
        for method in operations
    }
    assert served == set(OPERATIONS)


def test_no_unexpected_error_was_logged(error_log: list[logging.LogRecord]) -> None:
    # runs after the fuzzing above: the last-resort handler logged nothing
    assert [record.getMessage() for record in error_log] == []
