from __future__ import annotations

import studio_outbox


def test_studio_outbox_exports_a_version() -> None:
    assert studio_outbox.__version__.count(".") == 2
    assert sorted(studio_outbox.__all__) == list(studio_outbox.__all__)
    for name in studio_outbox.__all__:
        assert hasattr(studio_outbox, name), name
