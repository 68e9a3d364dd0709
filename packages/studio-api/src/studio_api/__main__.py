"""``python -m studio_api``: serve Studio with the settings of the environment."""

from __future__ import annotations

import sys

from ._app import EXPECTED_STARTUP_ERRORS
from ._exceptions import PortUnavailable, SettingsError
from ._server import run


def main() -> int:
    """Serve until interrupted.

    A settings error is printed without a traceback (exit code 2), and so is an engine that
    cannot start (exit code 1).
    """
    try:
        run()
    except SettingsError as exc:
        print(f"studio: {exc}", file=sys.stderr)
        return 2
    except PortUnavailable as exc:
        print(f"studio cannot start: {exc}", file=sys.stderr)
        return 1
    except EXPECTED_STARTUP_ERRORS as exc:
        print(f"studio cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
