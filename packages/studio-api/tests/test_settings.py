from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from studio_api import SettingsError, StudioSettings
from studio_scheduler_core import SchedulerSettings

ALL_VARS = {
    "LIONAGI_STUDIO_DB",
    "LIONAGI_STUDIO_HOST",
    "LIONAGI_STUDIO_PORT",
    "LIONAGI_STUDIO_AUTH_TOKEN",
    "LIONAGI_STUDIO_TICK_SECONDS",
    "LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT",
    "LIONAGI_STUDIO_MAX_ADHOC_CONCURRENT",
    "LIONAGI_STUDIO_INVOCATION_DEADLINE_SECONDS",
    "LIONAGI_STUDIO_REAPER_INTERVAL_SECONDS",
    "LIONAGI_STUDIO_CHECKPOINT_INTERVAL_SECONDS",
    "LIONAGI_SCHEDULER_TZ",
    "LIONAGI_SCHEDULER_CWD",
    "LIONAGI_SCHEDULER_PROJECTS",
    "LIONAGI_SCHEDULER_COMMAND_ALLOWLIST",
    "LIONAGI_LI_EXECUTABLE",
    "LIONAGI_STUDIO_NOTIFY_TEMPLATE",
    "LIONAGI_STUDIO_GITHUB_API_URL",
    "GITHUB_TOKEN",
    "LIONAGI_STUDIO_SYNCHRONOUS",
    "LIONAGI_STUDIO_MAX_BODY_BYTES",
    "LIONAGI_SCHEDULER_CHILD_ENV_PASS",
    "LIONAGI_STUDIO_RUN_LOG_DIR",
    "LIONAGI_STUDIO_RUN_LOG_BYTES",
    "LIONAGI_STUDIO_RETENTION_DAYS",
    "LIONAGI_STUDIO_DISPATCH_RETENTION_DAYS",
    "LIONAGI_STUDIO_DEAD_LETTER_RETENTION_DAYS",
    "LIONAGI_STUDIO_AUDIT_RETENTION_DAYS",
    "LIONAGI_STUDIO_ARCHIVE_DIR",
    "LIONAGI_STUDIO_LOG_FORMAT",
    "LIONAGI_STUDIO_METRICS_PUBLIC",
    "LIONAGI_STUDIO_WEBHOOK_SECRET",
    "LIONAGI_STUDIO_NODE_ID",
    "LIONAGI_STUDIO_NODE_URL",
    "LIONAGI_STUDIO_SCHEDULED_ON_ANY_NODE",
}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ALL_VARS:
        monkeypatch.delenv(name, raising=False)


def test_every_design_variable_is_a_setting() -> None:
    assert set(StudioSettings.ENV_VARS.values()) == ALL_VARS


def test_defaults() -> None:
    s = StudioSettings.from_env({})
    assert s.db == Path("~/.lionagi/studio/state.db").expanduser()
    assert (s.host, s.port, s.auth_token) == ("127.0.0.1", 8765, None)
    assert s.tick_seconds == 30
    assert (s.max_scheduled_concurrent, s.max_adhoc_concurrent) == (4, 4)
    assert s.invocation_deadline_seconds == 7200
    assert s.reaper_interval_seconds == 300
    assert s.checkpoint_interval_seconds == 3600
    assert s.timezone  # the system zone (or UTC)
    assert s.default_cwd is None and s.li_executable is None and s.notify_template is None
    assert s.command_allowlist == ()
    assert s.github_api_url == "https://api.github.com"
    assert s.github_token is None
    assert not s.auth_enabled


def test_reads_os_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    li = tmp_path / "li"
    li.write_text("#!/bin/sh\n")
    li.chmod(0o755)
    env = {
        "LIONAGI_STUDIO_DB": str(tmp_path / "x" / "s.db"),
        "LIONAGI_STUDIO_HOST": "localhost",
        "LIONAGI_STUDIO_PORT": "9000",
        "LIONAGI_STUDIO_AUTH_TOKEN": "s3cret-token",
        "LIONAGI_STUDIO_TICK_SECONDS": "2.5",
        "LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT": "7",
        "LIONAGI_STUDIO_MAX_ADHOC_CONCURRENT": "3",
        "LIONAGI_STUDIO_INVOCATION_DEADLINE_SECONDS": "60",
        "LIONAGI_STUDIO_REAPER_INTERVAL_SECONDS": "10",
        "LIONAGI_STUDIO_CHECKPOINT_INTERVAL_SECONDS": "20",
        "LIONAGI_SCHEDULER_TZ": "Europe/Paris",
        "LIONAGI_SCHEDULER_CWD": str(tmp_path),
        "LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": " sh, python3 ,,",
        "LIONAGI_LI_EXECUTABLE": str(li),
        "LIONAGI_STUDIO_NOTIFY_TEMPLATE": json.dumps(["notify", "{deliver_to}", "{payload}"]),
        "LIONAGI_STUDIO_GITHUB_API_URL": "http://127.0.0.1:9/api/",
        "GITHUB_TOKEN": "ghp_x",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    s = StudioSettings()
    assert s.db == tmp_path / "x" / "s.db"
    assert (s.host, s.port) == ("localhost", 9000)
    assert s.auth_token is not None and s.auth_token.get_secret_value() == "s3cret-token"
    assert s.tick_seconds == 2.5
    assert (s.max_scheduled_concurrent, s.max_adhoc_concurrent) == (7, 3)
    assert s.invocation_deadline_seconds == 60
    assert (s.reaper_interval_seconds, s.checkpoint_interval_seconds) == (10, 20)
    assert s.timezone == "Europe/Paris"
    assert s.default_cwd == str(tmp_path)
    assert s.command_allowlist == ("sh", "python3")
    assert s.li_executable == str(li)
    assert s.notify_template == ("notify", "{deliver_to}", "{payload}")
    assert s.github_api_url == "http://127.0.0.1:9/api"
    assert s.github_token is not None and s.github_token.get_secret_value() == "ghp_x"
    # the same through an explicit mapping, without touching os.environ
    assert StudioSettings.from_env(env) == s


def test_keyword_overrides_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIONAGI_STUDIO_PORT", "9000")
    assert StudioSettings(port=9100).port == 9100
    assert StudioSettings.from_env(port=9200).port == 9200
    assert StudioSettings.from_env(port=None).port == 9000
    s = StudioSettings.from_env({"LIONAGI_STUDIO_PORT": "9300"})
    assert s.with_overrides(port=9400, host=None).port == 9400
    assert s.with_overrides() is s
    with pytest.raises(SettingsError, match="LIONAGI_STUDIO_PORT"):
        s.with_overrides(port=-1)
    with pytest.raises(TypeError, match="nope"):
        StudioSettings.from_env({}, nope=1)


def test_empty_values_count_as_unset() -> None:
    s = StudioSettings.from_env({"LIONAGI_STUDIO_PORT": "", "LIONAGI_STUDIO_AUTH_TOKEN": ""})
    assert s.port == 8765 and s.auth_token is None


def test_unrelated_environment_names_are_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # field names must never be read as variables (HOST and PORT are common in containers)
    monkeypatch.setenv("HOST", "0.0.0.0")
    monkeypatch.setenv("PORT", "1")
    monkeypatch.setenv("port", "1")
    s = StudioSettings()
    assert (s.host, s.port) == ("127.0.0.1", 8765)


@pytest.mark.parametrize(
    ("variable", "value", "fragment"),
    [
        ("LIONAGI_STUDIO_PORT", "abc", "valid integer"),
        ("LIONAGI_STUDIO_PORT", "70000", "65535"),
        ("LIONAGI_STUDIO_PORT", "-1", "greater than or equal to 0"),
        ("LIONAGI_STUDIO_HOST", "a b", "host name"),
        ("LIONAGI_STUDIO_DB", "   ", "not empty"),
        ("LIONAGI_STUDIO_DB", ":memory:", "file path"),
        ("LIONAGI_STUDIO_DB", "postgresql://db:port/studio", "port must be a number"),
        ("LIONAGI_STUDIO_DB", "postgresql://db:0/studio", "port must be a number"),
        ("LIONAGI_STUDIO_DB", "postgresql://db/a/b", "one database name"),
        ("LIONAGI_STUDIO_DB", "postgresql://db/studio#x", "no #fragment"),
        ("LIONAGI_STUDIO_DB", "postgresql://db/stu dio", "spaces"),
        ("LIONAGI_STUDIO_DB", "mysql://db/studio", "give a SQLite file path or a postgresql://"),
        ("LIONAGI_STUDIO_NODE_ID", "n\u00e9", "printable ASCII"),
        ("LIONAGI_STUDIO_NODE_ID", "x" * 57, "at most 56"),
        ("LIONAGI_STUDIO_NODE_URL", "10.0.0.5:8765", "http(s) URL"),
        ("LIONAGI_STUDIO_NODE_URL", "http://10.0.0.5:8765/api", "base URL"),
        ("LIONAGI_STUDIO_NODE_URL", "http://u:p@10.0.0.5:8765", "base URL"),
        ("LIONAGI_STUDIO_AUTH_TOKEN", "has space", "printable ASCII"),
        ("LIONAGI_STUDIO_TICK_SECONDS", "0", "greater than 0"),
        ("LIONAGI_STUDIO_TICK_SECONDS", "nan", "finite"),
        ("LIONAGI_STUDIO_TICK_SECONDS", "soon", "valid number"),
        ("LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT", "0", "greater than or equal to 1"),
        ("LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT", "2.5", "valid integer"),
        ("LIONAGI_STUDIO_MAX_ADHOC_CONCURRENT", "-3", "greater than or equal to 1"),
        ("LIONAGI_STUDIO_INVOCATION_DEADLINE_SECONDS", "inf", "finite"),
        ("LIONAGI_STUDIO_REAPER_INTERVAL_SECONDS", "-5", "greater than 0"),
        ("LIONAGI_STUDIO_CHECKPOINT_INTERVAL_SECONDS", "x", "valid number"),
        ("LIONAGI_SCHEDULER_CWD", "relative/dir", "absolute"),
        ("LIONAGI_SCHEDULER_COMMAND_ALLOWLIST", "sh,/bin/rm", "bare command name"),
        ("LIONAGI_SCHEDULER_COMMAND_ALLOWLIST", "-x", "bare command name"),
        ("LIONAGI_LI_EXECUTABLE", "li", "absolute"),
        ("LIONAGI_LI_EXECUTABLE", "/nonexistent/li", "not an executable"),
        ("LIONAGI_STUDIO_NOTIFY_TEMPLATE", "notify-send {payload}", "JSON list of strings"),
        ("LIONAGI_STUDIO_NOTIFY_TEMPLATE", '{"a": 1}', "JSON list of strings"),
        ("LIONAGI_STUDIO_NOTIFY_TEMPLATE", '["a", 1]', "JSON list of strings"),
        ("LIONAGI_STUDIO_NOTIFY_TEMPLATE", "[]", "program to run"),
        ("LIONAGI_STUDIO_GITHUB_API_URL", "ftp://x", "http(s) URL"),
        ("LIONAGI_STUDIO_GITHUB_API_URL", "not a url", "http(s) URL"),
        ("GITHUB_TOKEN", "tok\ten", "printable ASCII"),
        ("LIONAGI_SCHEDULER_PROJECTS", "web=/srv/web", "JSON object"),
        ("LIONAGI_SCHEDULER_PROJECTS", '["/srv/web"]', "JSON object"),
        ("LIONAGI_SCHEDULER_PROJECTS", '{"web": "srv/web"}', "absolute directory path"),
        ("LIONAGI_SCHEDULER_PROJECTS", '{"web": 1}', "absolute directory path"),
        ("LIONAGI_SCHEDULER_PROJECTS", '{"": "/srv"}', "non-empty"),
    ],
)
def test_an_invalid_value_names_its_variable(variable: str, value: str, fragment: str) -> None:
    with pytest.raises(SettingsError) as info:
        StudioSettings.from_env({variable: value})
    assert info.value.variable == variable
    assert str(info.value).startswith(f"{variable}: ")
    assert fragment in str(info.value)


def test_invalid_os_environ_value_raises_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIONAGI_STUDIO_MAX_ADHOC_CONCURRENT", "many")
    with pytest.raises(SettingsError, match="^LIONAGI_STUDIO_MAX_ADHOC_CONCURRENT: "):
        StudioSettings()
    with pytest.raises(SettingsError, match="^LIONAGI_STUDIO_PORT: "):
        StudioSettings(port="x")


def test_several_invalid_values_are_all_named() -> None:
    with pytest.raises(SettingsError) as info:
        StudioSettings.from_env({"LIONAGI_STUDIO_PORT": "x", "LIONAGI_STUDIO_TICK_SECONDS": "-1"})
    assert set(info.value.problems) == {"LIONAGI_STUDIO_PORT", "LIONAGI_STUDIO_TICK_SECONDS"}
    assert "LIONAGI_STUDIO_TICK_SECONDS: " in str(info.value)


def test_secrets_are_never_echoed() -> None:
    with pytest.raises(SettingsError) as info:
        StudioSettings.from_env({"LIONAGI_STUDIO_AUTH_TOKEN": "leak me please"})
    assert "leak me" not in str(info.value)
    s = StudioSettings.from_env({"LIONAGI_STUDIO_AUTH_TOKEN": "hunter2", "GITHUB_TOKEN": "ghp_z"})
    assert "hunter2" not in repr(s) and "ghp_z" not in repr(s)


def test_unknown_timezone_warns_and_falls_back_to_utc(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="studio_api"):
        s = StudioSettings.from_env({"LIONAGI_SCHEDULER_TZ": "Mars/Olympus_Mons"})
    assert s.timezone == "UTC"
    assert "LIONAGI_SCHEDULER_TZ" in caplog.text and "Mars/Olympus_Mons" in caplog.text


def test_timezone_defaults_to_the_system_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert StudioSettings.from_env({}).timezone == "Asia/Tokyo"
    monkeypatch.setenv("TZ", "Not/AZone")
    assert StudioSettings.from_env({}).timezone  # falls through to /etc/localtime or UTC


def test_a_missing_cwd_directory_only_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="studio_api"):
        s = StudioSettings.from_env({"LIONAGI_SCHEDULER_CWD": str(tmp_path / "later")})
    assert s.default_cwd == str(tmp_path / "later")
    assert "LIONAGI_SCHEDULER_CWD" in caplog.text


def test_db_path_is_expanded_and_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert StudioSettings.from_env({"LIONAGI_STUDIO_DB": "~/s.db"}).db == tmp_path / "s.db"
    monkeypatch.chdir(tmp_path)
    assert StudioSettings.from_env({"LIONAGI_STUDIO_DB": "rel.db"}).db == tmp_path / "rel.db"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"])
def test_loopback_hosts_need_no_token(host: str) -> None:
    StudioSettings.from_env({"LIONAGI_STUDIO_HOST": host}).check_bind()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "example.org"])
def test_non_loopback_without_token_is_refused(host: str) -> None:
    s = StudioSettings.from_env({"LIONAGI_STUDIO_HOST": host})
    with pytest.raises(SettingsError) as info:
        s.check_bind()
    assert info.value.variable == "LIONAGI_STUDIO_HOST"
    assert "LIONAGI_STUDIO_AUTH_TOKEN" in str(info.value)
    StudioSettings.from_env(
        {"LIONAGI_STUDIO_HOST": host, "LIONAGI_STUDIO_AUTH_TOKEN": "tok"}
    ).check_bind()


def test_to_scheduler_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LIONAGI_STUDIO_AUTH_TOKEN", "secret")
    monkeypatch.setenv("SOME_CHILD_VAR", "kept")
    s = StudioSettings.from_env(
        {
            "LIONAGI_STUDIO_TICK_SECONDS": "5",
            "LIONAGI_STUDIO_MAX_SCHEDULED_CONCURRENT": "2",
            "LIONAGI_STUDIO_MAX_ADHOC_CONCURRENT": "3",
            "LIONAGI_STUDIO_INVOCATION_DEADLINE_SECONDS": "99",
            "LIONAGI_STUDIO_REAPER_INTERVAL_SECONDS": "11",
            "LIONAGI_STUDIO_CHECKPOINT_INTERVAL_SECONDS": "12",
            "LIONAGI_SCHEDULER_TZ": "America/New_York",
            "LIONAGI_SCHEDULER_CWD": str(tmp_path),
            "LIONAGI_SCHEDULER_COMMAND_ALLOWLIST": "sh",
            "LIONAGI_STUDIO_NOTIFY_TEMPLATE": '["cat"]',
            "LIONAGI_STUDIO_GITHUB_API_URL": "http://127.0.0.1:1",
            "GITHUB_TOKEN": "ghp_1",
        }
    )
    sched = s.to_scheduler_settings()
    assert isinstance(sched, SchedulerSettings)
    assert sched.tick_seconds == 5
    assert (sched.max_scheduled_concurrent, sched.max_adhoc_concurrent) == (2, 3)
    assert sched.invocation_deadline_seconds == 99
    assert (sched.reaper_interval_seconds, sched.checkpoint_interval_seconds) == (11, 12)
    assert sched.timezone == "America/New_York"
    assert sched.default_cwd == str(tmp_path)
    assert sched.command_allowlist == ("sh",)
    assert sched.notify_template == ("cat",)
    assert sched.github_api_url == "http://127.0.0.1:1"
    assert sched.github_token == "ghp_1"
    assert sched.li_executable is None
    # children inherit the host's environment, minus the API's own bearer token
    assert sched.child_env is not None
    assert sched.child_env["SOME_CHILD_VAR"] == "kept"
    assert "LIONAGI_STUDIO_AUTH_TOKEN" not in sched.child_env
    assert os.environ["LIONAGI_STUDIO_AUTH_TOKEN"] == "secret"


def test_registered_projects_reach_the_scheduler(tmp_path: Path) -> None:
    settings = StudioSettings.from_env(
        {"LIONAGI_SCHEDULER_PROJECTS": json.dumps({"web": str(tmp_path), "api": "~/api"})}
    )
    projects = settings.to_scheduler_settings().project_paths
    assert projects == {"web": str(tmp_path), "api": str(Path("~/api").expanduser())}
    assert StudioSettings.from_env({}).to_scheduler_settings().project_paths == {}


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://studio@db/studio",
        "postgres://db/studio",
        "postgresql://u:secret@db:5433/studio?sslmode=require",
        "postgresql:///studio?host=/var/run/postgresql",
        "postgresql://h1:5432,h2:5433/studio",
    ],
)
def test_a_postgresql_url_is_the_database(url: str) -> None:
    s = StudioSettings.from_env({"LIONAGI_STUDIO_DB": f"  {url} "})
    assert s.db == url and isinstance(s.db, str)
    assert s.backend == "postgresql" and s.db_file is None
    scheduler = s.to_scheduler_settings()
    assert scheduler.run_log_dir == str(Path("~/.lionagi/studio/runs").expanduser())


def test_runs_dir_on_postgresql_follows_the_run_log_setting(tmp_path: Path) -> None:
    s = StudioSettings.from_env(
        {"LIONAGI_STUDIO_DB": "postgresql://db/s", "LIONAGI_STUDIO_RUN_LOG_DIR": str(tmp_path)}
    )
    assert s.runs_dir == tmp_path and s.to_scheduler_settings().run_log_dir == str(tmp_path)


def test_sqlite_keeps_runs_beside_the_file(tmp_path: Path) -> None:
    s = StudioSettings.from_env({"LIONAGI_STUDIO_DB": str(tmp_path / "s.db")})
    assert s.backend == "sqlite" and s.db_file == tmp_path / "s.db"
    assert s.runs_dir == tmp_path / "runs"
    assert s.to_scheduler_settings().run_log_dir is None, "the engine finds runs/ itself"


def test_node_id_defaults_to_host_and_pid() -> None:
    import socket

    s = StudioSettings.from_env({})
    assert s.node_id is None and s.node == f"{socket.gethostname()}:{os.getpid()}"
    named = StudioSettings.from_env({"LIONAGI_STUDIO_NODE_ID": " studio-a "})
    assert named.node_id == "studio-a" == named.node


def test_a_bad_url_never_echoes_its_password() -> None:
    with pytest.raises(SettingsError) as info:
        StudioSettings.from_env({"LIONAGI_STUDIO_DB": "postgresql://u:s3cret@db:x/s?password=p2"})
    assert "s3cret" not in str(info.value) and "p2" not in str(info.value)
    assert "postgresql://u:***@db:x/s?password=***" in str(info.value)


def test_node_url_reaches_the_scheduler_settings() -> None:
    s = StudioSettings.from_env({"LIONAGI_STUDIO_NODE_URL": " http://10.0.0.5:8765/ "})
    assert s.node_url == "http://10.0.0.5:8765"
    assert s.to_scheduler_settings().node_url == "http://10.0.0.5:8765"
    assert StudioSettings.from_env({}).to_scheduler_settings().node_url is None


def test_scheduled_on_any_node_reaches_the_scheduler_and_a_bad_value_is_refused() -> None:
    # Unset: the engine decides by the database (on for PostgreSQL, off for SQLite).
    assert StudioSettings.from_env({}).to_scheduler_settings().scheduled_on_any_node is None
    on = StudioSettings.from_env({"LIONAGI_STUDIO_SCHEDULED_ON_ANY_NODE": "1"})
    assert on.to_scheduler_settings().scheduled_on_any_node is True
    off = StudioSettings.from_env({"LIONAGI_STUDIO_SCHEDULED_ON_ANY_NODE": "false"})
    assert off.to_scheduler_settings().scheduled_on_any_node is False
    with pytest.raises(SettingsError) as info:
        StudioSettings.from_env({"LIONAGI_STUDIO_SCHEDULED_ON_ANY_NODE": "maybe"})
    assert "LIONAGI_STUDIO_SCHEDULED_ON_ANY_NODE" in str(info.value)
