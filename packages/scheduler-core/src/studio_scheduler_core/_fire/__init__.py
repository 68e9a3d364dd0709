"""One fire of a schedule: the occurrence transaction, prepare / commit / execute / finish, and the
runner that tracks fire tasks and follow-up chains.
"""
