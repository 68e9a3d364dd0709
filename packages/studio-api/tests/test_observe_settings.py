"""The observability settings: retention, log format, public metrics."""

from __future__ import annotations

import pytest

from studio_api import SettingsError, StudioSettings


def test_defaults_and_values_reach_the_scheduler() -> None:
    s = StudioSettings.from_env({})
    assert (s.retention_days, s.log_format, s.metrics_public) == (30, "text", False)
    s = StudioSettings.from_env(
        {
            "LIONAGI_STUDIO_RETENTION_DAYS": "0",
            "LIONAGI_STUDIO_LOG_FORMAT": "json",
            "LIONAGI_STUDIO_METRICS_PUBLIC": "true",
        }
    )
    assert (s.retention_days, s.log_format, s.metrics_public) == (0, "json", True)
    assert s.to_scheduler_settings().retention_days == 0


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LIONAGI_STUDIO_LOG_FORMAT", "xml"),
        ("LIONAGI_STUDIO_LOG_FORMAT", "JSON "),
        ("LIONAGI_STUDIO_RETENTION_DAYS", "-1"),
        ("LIONAGI_STUDIO_RETENTION_DAYS", "nan"),
        ("LIONAGI_STUDIO_METRICS_PUBLIC", "maybe"),
    ],
)
def test_an_invalid_value_refuses_startup_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(SettingsError) as info:
        StudioSettings.from_env({variable: value})
    assert variable in str(info.value)
