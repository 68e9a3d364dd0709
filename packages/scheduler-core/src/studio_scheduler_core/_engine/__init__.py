"""The engine on top: the tick loop that coordinates evaluation, recovery, delivery and the worker,
with the database lock and file checks.
"""
