from __future__ import annotations
import __future__

from types import ModuleType

import studio_launcher


def test_studio_launcher_exports_a_version() -> None:
    assert studio_launcher.__version__.count(".") == 2
    assert sorted(studio_launcher.__all__) == list(studio_launcher.__all__)
    for name in studio_launcher.__all__:
        assert hasattr(studio_launcher, name), name


def test_all_is_sorted_importable_and_exactly_the_public_names() -> None:
    # the launcher's suite cannot import studio_state.testing.assert_public_api (a leaf), so
    # this is its runtime form: what the package __init__ binds, minus submodules and
    # the `from __future__` feature
    public = sorted(
        name
        for name, value in vars(studio_launcher).items()
        if not name.startswith("_")
        and not isinstance(value, ModuleType)
        and not isinstance(value, __future__._Feature)
    )
    assert list(studio_launcher.__all__) == sorted(studio_launcher.__all__)
    assert sorted(studio_launcher.__all__) == sorted([*public, "__version__"])
