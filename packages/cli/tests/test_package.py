from __future__ import annotations

import studio_cli
from studio_state.testing import assert_public_api


def test_studio_cli_exports_a_version() -> None:
    assert studio_cli.__version__.count(".") == 2
    assert sorted(studio_cli.__all__) == list(studio_cli.__all__)
    for name in studio_cli.__all__:
        assert hasattr(studio_cli, name), name


def test_console_script_entry_point_is_main() -> None:
    from studio_cli.__main__ import app, main

    assert main is studio_cli.main
    assert app is studio_cli.app


def test_all_is_sorted_importable_and_exactly_the_public_names() -> None:
    assert_public_api(studio_cli)
