"""Errors raised by studio-api.

StudioApiError
 └── SettingsError    a setting (environment variable) has an invalid value, or the host
                      refuses to start with the settings it was given
"""

from __future__ import annotations


class StudioApiError(Exception):
    """Base class of every studio-api error."""


class SettingsError(StudioApiError, ValueError):
    """An invalid setting; ``variable`` names the environment variable at fault.

    ``str()`` is ``"<VARIABLE>: <message>"`` (one line per variable when several are invalid).
    """

    def __init__(self, variable: str, message: str, *, problems: dict[str, str] | None = None):
        self.variable = variable
        self.message = message
        self.problems = dict(problems) if problems else {variable: message}
        super().__init__("\n".join(f"{name}: {text}" for name, text in self.problems.items()))
