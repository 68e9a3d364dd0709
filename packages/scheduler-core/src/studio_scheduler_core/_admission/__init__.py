"""Whether a due occurrence may fire now: the admission gates in order, their reason codes, and the
reservation a fire holds.
"""
