from __future__ import annotations

import studio_cli


def test_studio_cli_exports_a_version() -> None:
    assert studio_cli.__version__.count(".") == 2
    assert sorted(studio_cli.__all__) == list(studio_cli.__all__)
    for name in studio_cli.__all__:
        assert hasattr(studio_cli, name), name
