"""The github_poll trigger source: the GitHub client, the paged scan, event collection and the poll
state stored on the schedule row.
"""
