"""``python -m studio_api``: serve Studio with the settings of the environment."""

from __future__ import annotations

import sys

from ._exceptions import SettingsError
from ._server import run


def main() -> int:
    """Serve until interrupted; a settings error is printed (no traceback), exit code 2."""
    try:
        run()
    except SettingsError as exc:
        print(f"studio: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
