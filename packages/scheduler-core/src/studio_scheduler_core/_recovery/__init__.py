"""Recovery after a crash: startup reconciliation of runs left running, the periodic reapers and
WAL checkpoint, and orphan process groups.
"""
