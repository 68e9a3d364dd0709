"""resolve_li_executable: LIONAGI_LI_EXECUTABLE, then PATH, then beside sys.executable."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from studio_launcher import ExecutableNotFound, require_li_executable, resolve_li_executable


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def no_li_beside_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Pretend the interpreter lives in an empty folder, so the last tier finds nothing."""
    folder = tmp_path / "python-bin"
    folder.mkdir()
    monkeypatch.setattr(sys, "executable", str(folder / "python3"))
    return folder


def test_env_variable_wins(tmp_path: Path) -> None:
    li = _exe(tmp_path / "custom" / "li-wrapper")
    on_path = _exe(tmp_path / "path" / "li")
    environ = {"LIONAGI_LI_EXECUTABLE": str(li), "PATH": str(on_path.parent)}
    assert resolve_li_executable(environ=environ) == ([str(li)], None)


def test_zero_argument_form_reads_os_environ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    li = _exe(tmp_path / "li")
    monkeypatch.setenv("LIONAGI_LI_EXECUTABLE", str(li))
    assert resolve_li_executable() == ([str(li)], None)


def test_configured_wins_over_env(tmp_path: Path) -> None:
    configured = _exe(tmp_path / "a" / "li")
    from_env = _exe(tmp_path / "b" / "li")
    result = resolve_li_executable(
        configured=str(configured), environ={"LIONAGI_LI_EXECUTABLE": str(from_env)}
    )
    assert result == ([str(configured)], None)


@pytest.mark.parametrize("value", ["li", "./bin/li", "bin/li"])
def test_relative_configured_path_is_refused(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _exe(tmp_path / "li")
    _exe(tmp_path / "bin" / "li")
    monkeypatch.chdir(tmp_path)
    prefix, reason = resolve_li_executable(environ={"LIONAGI_LI_EXECUTABLE": value, "PATH": ""})
    assert prefix is None
    assert reason is not None and "not an absolute path" in reason and value in reason


def test_configured_but_unusable_does_not_fall_back(tmp_path: Path) -> None:
    on_path = _exe(tmp_path / "path" / "li")
    not_executable = tmp_path / "li-plain"
    not_executable.write_text("x")
    for configured in (str(not_executable), str(tmp_path / "missing"), str(tmp_path)):
        prefix, reason = resolve_li_executable(
            environ={"LIONAGI_LI_EXECUTABLE": configured, "PATH": str(on_path.parent)}
        )
        assert prefix is None
        assert reason is not None and configured in reason


def test_first_absolute_path_entry_with_li(tmp_path: Path, no_li_beside_python: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    second = _exe(tmp_path / "second" / "li")
    _exe(tmp_path / "third" / "li")
    not_exec = tmp_path / "noexec" / "li"
    not_exec.parent.mkdir()
    not_exec.write_text("x")
    path = ":".join([str(empty), str(not_exec.parent), str(second.parent), str(tmp_path / "third")])
    assert resolve_li_executable(environ={"PATH": path}) == ([str(second)], None)


def test_relative_path_entries_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_li_beside_python: Path
) -> None:
    _exe(tmp_path / "li")
    _exe(tmp_path / "rel" / "li")
    monkeypatch.chdir(tmp_path)
    prefix, reason = resolve_li_executable(environ={"PATH": ".:rel::"})
    assert prefix is None
    assert reason is not None and "relative PATH entries skipped" in reason
    absolute = _exe(tmp_path / "abs" / "li")
    prefix, _ = resolve_li_executable(environ={"PATH": f".:{absolute.parent}"})
    assert prefix == [str(absolute)]


def test_beside_sys_executable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv_bin = tmp_path / "venv" / "bin"
    li = _exe(venv_bin / "li")
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python3"))
    assert resolve_li_executable(environ={"PATH": str(tmp_path / "nothing-here")}) == (
        [str(li)],
        None,
    )
    assert resolve_li_executable(environ={}) == ([str(li)], None)


def test_failure_lists_each_try(no_li_beside_python: Path, tmp_path: Path) -> None:
    prefix, reason = resolve_li_executable(environ={"PATH": str(tmp_path)})
    assert prefix is None
    assert reason is not None
    parts = reason.split("; ")
    assert parts[0] == "LIONAGI_LI_EXECUTABLE is not set"
    assert "PATH" in parts[1]
    assert str(no_li_beside_python / "li") in parts[2]
    with pytest.raises(ExecutableNotFound) as info:
        require_li_executable(environ={"PATH": str(tmp_path)})
    assert info.value.detail == reason


def test_relative_sys_executable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "python3")
    prefix, reason = resolve_li_executable(environ={})
    assert prefix is None
    assert reason is not None and "sys.executable is not an absolute path" in reason
