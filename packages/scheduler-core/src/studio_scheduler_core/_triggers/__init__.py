"""When a schedule is due: cron and interval cadence in a time zone, the trigger registry, and the
threshold gate with its metrics.
"""
