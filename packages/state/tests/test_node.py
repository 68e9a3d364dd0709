"""A node's name is checked without psycopg (hosts validate LIONAGI_STUDIO_NODE_ID on SQLite)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from studio_state import InvalidSetting, check_node_id, default_node_id


def test_the_default_is_host_and_pid_and_passes_the_check() -> None:
    assert default_node_id() == f"{socket.gethostname()}:{os.getpid()}"
    assert check_node_id(default_node_id()) == default_node_id()


@pytest.mark.parametrize("bad", ["", "x" * 57, "caf\u00e9", "tab\there", None, 7])
def test_a_bad_node_id_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(InvalidSetting, match="^node_id must"):
        check_node_id(bad)


def test_the_check_loads_no_driver() -> None:
    code = (
        "import sys, studio_state; studio_state.check_node_id('n' * 56); "
        "print('psycopg' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
