"""Run and schedule notifications: the ``notify`` setting's validation, the dispatches a terminal
run or a gate's disable enqueues, and the store holding the reads they take.
"""
