from __future__ import annotations

import studio_state
from studio_state.testing import assert_public_api


def test_studio_state_exports_a_version() -> None:
    assert studio_state.__version__.count(".") == 2
    assert sorted(studio_state.__all__) == list(studio_state.__all__)
    for name in studio_state.__all__:
        assert hasattr(studio_state, name), name


def test_all_is_sorted_importable_and_exactly_the_public_names() -> None:
    assert_public_api(studio_state)
