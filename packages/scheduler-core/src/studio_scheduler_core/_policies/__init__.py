"""Schedule policies that act on the engine's pass: overlap (buffer one or all occurrences,
cancel the other run) and starting due retries and buffered occurrences. The rules they rest on
live lower down: policy fields, jitter, buffers and backfill with the schedules, retry planning
with the fire path.
"""
