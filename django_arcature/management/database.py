"""The ``--database`` option of every command that reads or writes the job table."""

from __future__ import annotations

from django.core.management.base import CommandParser
from django.utils.translation import gettext

from django_arcature.management.options import database_alias


def add_database_argument(parser: CommandParser) -> None:
    """``--database``, unset unless given: ``conf.job_database`` then decides."""
    parser.add_argument(
        "--database",
        type=database_alias,
        # Read when the parser is built, in the language the command speaks.
        help=gettext(
            'The database alias holding the job table. Default: ARCATURE["DATABASE"], else '
            '"default".'
        ),
    )
