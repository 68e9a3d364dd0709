"""Queued runs: the ad-hoc enqueue/read/cancel service, the host task worker that claims
them (and the scheduled fires the leader queued for any node) through the fire pipeline and
launches them, the claim, its leases and lease watch, and the store holding the queue's SQL.
"""
