"""Errors raised by studio-api.

StudioApiError
 ├── SettingsError    a setting (environment variable) has an invalid value, or the host
 │                    refuses to start with the settings it was given
 └── PortUnavailable  the address to serve on cannot be bound (another server holds the port)
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


class PortUnavailable(StudioApiError):
    """``host:port`` cannot be bound; raised before the engine opens the database.

    ``str()`` is ``"cannot serve on <host>:<port>: <reason>"``.
    """

    def __init__(self, host: str, port: int, reason: str) -> None:
        self.host = host
        self.port = port
        self.reason = reason
        super().__init__(f"cannot serve on {host}:{port}: {reason}")
