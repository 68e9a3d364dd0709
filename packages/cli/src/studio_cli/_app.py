"""The ``studio`` root command and ``main()``, the console-script entry point.

``main()`` runs click in non-standalone mode so that every failure is reported the same way:
one ``error: …`` line on stderr, exit 1 (2 for usage errors), never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from .__about__ import __version__
from ._commands.archive import archive_group
from ._commands.db import db_group
from ._commands.dispatch import dispatch_group
from ._commands.run import run_group
from ._commands.schedule import schedule_group
from ._commands.serve import serve
from ._commands.token import token_group
from ._commands.usage import usage_group
from ._errors import EXIT_INTERRUPTED, CliError, fail, usage_error
from ._types import check_arguments

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group("studio", context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "--version", "-V", prog_name="studio")
def app() -> None:
    """Studio: schedules, runs and dispatches of the local scheduling control plane.

    Commands work on the database directly (--db, else $LIONAGI_STUDIO_DB, else
    ~/.lionagi/studio/state.db), except 'schedule trigger', which asks the running server
    ($LIONAGI_STUDIO_URL, default http://127.0.0.1:8765). Read commands take --json.
    """


app.add_command(serve)
app.add_command(schedule_group)
app.add_command(dispatch_group)
app.add_command(run_group)
app.add_command(usage_group)
app.add_command(token_group)
app.add_command(db_group)
app.add_command(archive_group)


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``studio`` with ``argv`` (default ``sys.argv[1:]``) and exit with its status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        check_arguments(args)
        app.main(args=args, prog_name="studio", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        fail(CliError("aborted", exit_code=EXIT_INTERRUPTED))
    except click.UsageError as exc:
        usage_error(exc)
    except click.ClickException as exc:
        fail(CliError(exc.format_message(), exit_code=exc.exit_code))
    except KeyboardInterrupt:
        fail(CliError("interrupted", exit_code=EXIT_INTERRUPTED))
    except SystemExit:
        raise
    except BaseException as exc:  # every other failure: one line, never a traceback
        fail(exc)
    sys.exit(0)
