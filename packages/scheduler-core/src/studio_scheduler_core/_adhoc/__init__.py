"""Ad-hoc queued runs: the enqueue/read/cancel service, the host task worker that claims and
launches them, and its leases.
"""
