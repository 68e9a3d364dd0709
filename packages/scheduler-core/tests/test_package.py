from __future__ import annotations

import studio_scheduler_core
from studio_state.testing import assert_public_api


def test_studio_scheduler_core_exports_a_version() -> None:
    assert studio_scheduler_core.__version__.count(".") == 2
    assert sorted(studio_scheduler_core.__all__) == list(studio_scheduler_core.__all__)
    for name in studio_scheduler_core.__all__:
        assert hasattr(studio_scheduler_core, name), name


def test_all_is_sorted_importable_and_exactly_the_public_names() -> None:
    assert_public_api(studio_scheduler_core)
