"""Recovery after a crash: startup reconciliation of runs left running, the periodic reapers and
WAL checkpoint, orphan process groups, and the store holding what they read.
"""
