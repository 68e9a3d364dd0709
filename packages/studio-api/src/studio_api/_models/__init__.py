"""Request and response models of the HTTP API (extra keys are refused everywhere).

:mod:`.base` holds the bases and the storable-value check, :mod:`.derive` builds models from the
records, :mod:`.schedules`, :mod:`.dispatch` and :mod:`.health` hold one family each.
"""

from __future__ import annotations

from .base import SQLITE_INT_MAX, ErrorOut, RequestModel, ResponseModel, check_storable
from .dispatch import (
    AckRequest,
    DispatchCreate,
    DispatchCreated,
    DispatchList,
    DispatchOut,
    DispatchStatus,
)
from .examples import SCHEDULE_CREATE_EXAMPLES
from .health import (
    DatabaseHealth,
    DispatchHealth,
    HealthOut,
    Holder,
    LimitsOut,
    SchedulerHealth,
    TransportHealth,
)
from .schedules import (
    ActionKind,
    BackfillOut,
    BackfillRequest,
    DisableRequest,
    FireTime,
    MissedFirePolicy,
    OverlapPolicy,
    PreviewOut,
    RunCreate,
    RunDetail,
    RunList,
    RunOut,
    RunStatus,
    ScheduleCreate,
    ScheduleList,
    ScheduleOut,
    ScheduleUpdate,
    TriggerOut,
    TriggerType,
)
from .stats import (
    ActivityBucketOut,
    ActivityOut,
    LastRunOut,
    ScheduleStatusOut,
    SpendOut,
    SpendRowOut,
)

__all__ = [
    "SCHEDULE_CREATE_EXAMPLES",
    "SQLITE_INT_MAX",
    "AckRequest",
    "ActionKind",
    "ActivityBucketOut",
    "ActivityOut",
    "BackfillOut",
    "BackfillRequest",
    "DatabaseHealth",
    "DisableRequest",
    "DispatchCreate",
    "DispatchCreated",
    "DispatchHealth",
    "DispatchList",
    "DispatchOut",
    "DispatchStatus",
    "ErrorOut",
    "FireTime",
    "HealthOut",
    "LastRunOut",
    "Holder",
    "LimitsOut",
    "MissedFirePolicy",
    "OverlapPolicy",
    "PreviewOut",
    "RequestModel",
    "ResponseModel",
    "RunCreate",
    "RunDetail",
    "RunList",
    "RunOut",
    "RunStatus",
    "ScheduleCreate",
    "ScheduleList",
    "ScheduleOut",
    "ScheduleStatusOut",
    "ScheduleUpdate",
    "SchedulerHealth",
    "SpendOut",
    "SpendRowOut",
    "TransportHealth",
    "TriggerOut",
    "TriggerType",
    "check_storable",
]
