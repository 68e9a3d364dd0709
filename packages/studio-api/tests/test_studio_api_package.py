from __future__ import annotations

import studio_api


def test_studio_api_exports_a_version() -> None:
    assert studio_api.__version__.count(".") == 2
    assert sorted(studio_api.__all__) == list(studio_api.__all__)
    for name in studio_api.__all__:
        assert hasattr(studio_api, name), name
