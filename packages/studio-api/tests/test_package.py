from __future__ import annotations

import studio_api
from studio_state.testing import assert_public_api


def test_studio_api_exports_a_version() -> None:
    assert studio_api.__version__.count(".") == 2
    assert sorted(studio_api.__all__) == list(studio_api.__all__)
    for name in studio_api.__all__:
        assert hasattr(studio_api, name), name


def test_the_models_follow_the_records() -> None:
    import dataclasses

    import studio_outbox
    import studio_scheduler_core as core
    from studio_api import _models

    specs = core.record_specs(core.Schedule)
    assert list(_models.ScheduleCreate.model_fields) == [s.name for s in specs if s.meta.create]
    assert "enabled" not in _models.ScheduleUpdate.model_fields
    public = [s.name for s in specs if s.meta.public]
    # the record's columns first, then what the views add: health and a set's drift
    assert list(_models.ScheduleOut.model_fields)[: len(public)] == public
    assert {"health", "drifted", "warnings"} <= set(_models.ScheduleOut.model_fields)
    assert list(_models.RunOut.model_fields) == [s.name for s in core.record_specs(core.Run)]
    public = [
        f.name
        for f in dataclasses.fields(studio_outbox.Dispatch)
        if f.name in (_models.DispatchOut.model_fields)
    ]
    assert public == list(_models.DispatchOut.model_fields)
    assert "ack_token" not in _models.DispatchOut.model_fields
    # the early bounds the API and CLI apply are the records' bounds
    for name, limit in studio_api.FIELD_LIMITS.items():
        assert next(s for s in specs if s.name == name).meta.maximum == limit, name


def test_all_is_sorted_importable_and_exactly_the_public_names() -> None:
    assert_public_api(studio_api)
