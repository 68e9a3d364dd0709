"""Schedule sets: ``ScheduleSet`` documents read from files, checked without a database.

:mod:`.loader` reads a document (a YAML subset where only ``true``/``false`` are booleans);
:mod:`.durations` parses ``"90s"``/``"15m"``/``"2h"``/``"1d"``; :mod:`.document` walks the
closed schema and maps a member onto a schedule's input fields (:mod:`.shapes`: the trigger
blocks' keys); :mod:`.resolve` checks every member with the schedule validation and gives each
the ``Schedule`` record it stands for, its name and digest.
"""
