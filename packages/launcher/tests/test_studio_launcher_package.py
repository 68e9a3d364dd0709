from __future__ import annotations

import studio_launcher


def test_studio_launcher_exports_a_version() -> None:
    assert studio_launcher.__version__.count(".") == 2
    assert sorted(studio_launcher.__all__) == list(studio_launcher.__all__)
    for name in studio_launcher.__all__:
        assert hasattr(studio_launcher, name), name
