"""The records: ``Schedule``, ``Action`` and ``Run`` as frozen dataclasses whose field metadata
drives the column lists, JSON columns, create/update field sets, follow-up overlay keys and the
API's models; and the vocabularies (trigger types, action kinds, policies, statuses) defined
once.
"""
