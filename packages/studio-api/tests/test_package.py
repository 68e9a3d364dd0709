from __future__ import annotations

import studio_api
from studio_state.testing import assert_public_api


def test_studio_api_exports_a_version() -> None:
    assert studio_api.__version__.count(".") == 2
    assert sorted(studio_api.__all__) == list(studio_api.__all__)
    for name in studio_api.__all__:
        assert hasattr(studio_api, name), name


def test_all_is_sorted_importable_and_exactly_the_public_names() -> None:
    assert_public_api(studio_api)
