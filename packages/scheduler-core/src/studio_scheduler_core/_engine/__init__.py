"""The engine on top: the tick loop that coordinates evaluation, recovery, delivery and the
worker, its start-up and shutdown, and the lock that keeps it one engine per database.
"""
