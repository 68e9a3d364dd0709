"""The engine on top: the tick loop that coordinates evaluation, recovery, delivery and the
worker, its start-up and shutdown, the lock that keeps it one engine per database, its health
figures, and the store holding the due scan and the other coordination reads.
"""
