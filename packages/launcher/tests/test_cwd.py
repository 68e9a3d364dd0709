"""resolve_cwd: action_cwd → project path → fallback → None (warned once), missing-cwd refusal."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from studio_launcher import CwdUnavailable, InvalidAction, LaunchError, resolve_cwd


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, str]:
    names = {}
    for name in ("own", "project", "fallback"):
        (tmp_path / name).mkdir()
        names[name] = str(tmp_path / name)
    names["gone"] = str(tmp_path / "gone")
    return names


def test_own_cwd_first(dirs: dict[str, str]) -> None:
    schedule = {"action_cwd": dirs["own"], "action_project": "p"}
    assert (
        resolve_cwd(schedule, project_paths={"p": dirs["project"]}, fallback=dirs["fallback"])
        == (dirs["own"])
    )


def test_project_path_when_no_own_cwd(dirs: dict[str, str]) -> None:
    schedule = {"action_cwd": None, "action_project": "p"}
    assert (
        resolve_cwd(schedule, project_paths={"p": dirs["project"]}, fallback=dirs["fallback"])
        == (dirs["project"])
    )


def test_project_path_when_own_cwd_is_gone(
    dirs: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    schedule = {"action_cwd": dirs["gone"], "action_project": "p"}
    with caplog.at_level(logging.WARNING, logger="studio_launcher"):
        assert resolve_cwd(schedule, project_paths={"p": dirs["project"]}) == dirs["project"]
    assert dirs["gone"] in caplog.text


def test_fallback_when_the_row_has_no_root(dirs: dict[str, str]) -> None:
    assert resolve_cwd({}, fallback=dirs["fallback"]) == dirs["fallback"]
    # an unregistered project gives no root: the fallback applies
    schedule = {"action_project": "unknown"}
    assert (
        resolve_cwd(schedule, project_paths={"p": dirs["project"]}, fallback=dirs["fallback"])
        == (dirs["fallback"])
    )
    # a registered project whose path is gone: the fallback applies too
    schedule = {"action_project": "p"}
    assert (
        resolve_cwd(schedule, project_paths={"p": dirs["gone"]}, fallback=dirs["fallback"])
        == (dirs["fallback"])
    )


def test_missing_own_cwd_without_other_root_is_refused(dirs: dict[str, str]) -> None:
    schedule = {"id": "s1", "action_cwd": dirs["gone"]}
    with pytest.raises(CwdUnavailable) as info:
        resolve_cwd(schedule, fallback=dirs["fallback"])  # the daemon-wide fallback is not its root
    assert info.value.path == dirs["gone"]
    assert info.value.field == "action_cwd"
    assert dirs["gone"] in str(info.value) and "no longer exists" in str(info.value)
    assert isinstance(info.value, LaunchError)

    schedule = {"action_cwd": dirs["gone"], "action_project": "p"}
    with pytest.raises(CwdUnavailable, match="no usable registered path"):
        resolve_cwd(schedule, project_paths={"p": dirs["gone"] + "-too"})


def test_own_cwd_that_is_a_file_or_relative_is_refused(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(CwdUnavailable, match="is not a directory"):
        resolve_cwd({"action_cwd": str(a_file)})
    with pytest.raises(CwdUnavailable, match="not an absolute path"):
        resolve_cwd({"action_cwd": "relative/dir"})


def test_relative_project_path_and_fallback_are_not_used(
    dirs: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert (
        resolve_cwd({"action_project": "p"}, project_paths={"p": "project"}, fallback="fallback")
        is None
    )


def test_none_when_nothing_applies(dirs: dict[str, str]) -> None:
    assert resolve_cwd({"action_cwd": "", "action_project": ""}) is None
    assert resolve_cwd({}, fallback=dirs["gone"]) is None


def test_non_string_field_is_refused() -> None:
    with pytest.raises(InvalidAction) as info:
        resolve_cwd({"action_cwd": 5})
    assert info.value.field == "action_cwd"


def test_inherit_deprecation_is_logged_once_per_process() -> None:
    code = """
import io, json, logging
from studio_launcher import resolve_cwd
stream = io.StringIO()
logging.basicConfig(stream=stream, level=logging.WARNING, format="%(levelname)s %(message)s")
results = [resolve_cwd({}), resolve_cwd({"action_project": "x"}), resolve_cwd({})]
print(json.dumps({"results": results, "log": stream.getvalue()}))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    report = json.loads(out.stdout)
    assert report["results"] == [None, None, None]
    assert report["log"].count("DEPRECATED") == 1
    assert report["log"].startswith("WARNING ")
