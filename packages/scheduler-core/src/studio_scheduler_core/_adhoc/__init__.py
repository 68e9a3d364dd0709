"""Ad-hoc queued runs: the enqueue/read/cancel service, the host task worker that claims them
through the fire pipeline and launches them, the claim, its leases and lease watch, and the
store holding the queue's SQL.
"""
