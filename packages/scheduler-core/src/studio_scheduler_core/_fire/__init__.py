"""One fire of a schedule: the shared pipeline (reserve → prepare → commit → release → start),
its steps (prepare, commit/occurrence, execute, finish), the runner that tracks fire tasks and
follow-up chains, and the store holding the fire's SQL.
"""
