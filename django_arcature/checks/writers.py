"""``arcature.W002``: SQLite in DEFERRED mode, said where it matters rather than everywhere.

SQLite lets one connection write at a time. In Django's default DEFERRED mode a
transaction that reads before it writes cannot wait for the write lock: if
another process holds it, the write fails at once with "database is locked",
whatever the ``timeout``. That needs a second writing process, and a running
worker is one (beside the web server that enqueues, or another worker). A single
process (``migrate``, ``shell``, the tests) never meets it.

So the warning is not a plain system check, which every management command
would print: it is a deployment check (``manage.py check --deploy``) and the
worker prints it when it starts (``arcature_worker``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.utils.translation import gettext as _


@checks.register(checks.Tags.compatibility, deploy=True)
def check_sqlite_writers(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """W002 for every SQLite database of the project, with ``check --deploy``."""
    return writer_messages(settings.DATABASES)


def writer_messages(databases: Mapping[str, Mapping[str, Any]]) -> list[checks.CheckMessage]:
    """W002 for each SQLite database in DEFERRED mode (explicit argument, for tests)."""
    messages: list[checks.CheckMessage] = []
    for alias, config in databases.items():
        if not str(config.get("ENGINE", "")).endswith("sqlite3"):
            continue
        options = config.get("OPTIONS", {}) or {}
        if options.get("transaction_mode") == "IMMEDIATE":
            continue
        messages.append(
            checks.Warning(
                _(
                    "DATABASES[%(alias)r] uses SQLite's default DEFERRED transactions. This "
                    "matters once two processes write at the same time (a worker beside your "
                    "web server, or two workers): a write inside transaction.atomic() can then "
                    "fail at once with 'database is locked'. One process alone is not affected."
                )
                % {"alias": alias},
                hint=_(
                    "Set DATABASES[%(alias)r]['OPTIONS'] = "
                    "{'transaction_mode': 'IMMEDIATE', 'timeout': 20}."
                )
                % {"alias": alias},
                id="arcature.W002",
            )
        )
    return messages
