"""Schedules as stored: validation of create/update input, the service the API and CLI share, the
shared schedule/run reads and writes, and the follow-up overlay keys.
"""
