"""Entry point of the ``studio`` console script and of ``python -m studio_cli``."""

from __future__ import annotations

from ._app import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
