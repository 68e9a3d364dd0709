from __future__ import annotations

import studio_state


def test_studio_state_exports_a_version() -> None:
    assert studio_state.__version__.count(".") == 2
    assert sorted(studio_state.__all__) == list(studio_state.__all__)
    for name in studio_state.__all__:
        assert hasattr(studio_state, name), name
