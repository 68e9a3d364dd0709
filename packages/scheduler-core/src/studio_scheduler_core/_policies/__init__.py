"""Schedule policies: overlap buffering, catch-up window, jitter, pause on failure, retries,
backfill. Each concern is a module; the engine, admission and fire paths call small hooks.
"""
