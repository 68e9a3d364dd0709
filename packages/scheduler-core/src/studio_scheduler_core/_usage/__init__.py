"""Usage evidence: the ``sessions`` rows a child reports for its invocation, and the spend sums
the budget gates read, with the store holding their SQL.
"""
