"""Suite-wide fixtures and the rule for unreachable databases.

Locally, a database server that is not running skips the database tests with a
loud banner. In CI (``CI=true``) the same situation fails the run: a green CI
must mean the tests ran on the real server.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
from django.db import connection

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

_unreachable: str | None = None


def _probe_database(config: pytest.Config) -> str | None:
    """None if the configured server answers, else why not."""
    from django.db import connections
    from pytest_django.plugin import blocking_manager_key

    # pytest-django blocks database access outside tests; the probe needs it.
    with config.stash[blocking_manager_key].unblock():
        return _probe(connections)


def _probe(connections: Any) -> str | None:
    settings_dict = dict(connections["default"].settings_dict)
    if settings_dict["ENGINE"].endswith("sqlite3"):
        return None
    try:
        wrapper = connections.create_connection("default")
        with wrapper._nodb_cursor() as cursor:
            cursor.execute("SELECT 1")
        wrapper.close()
    except Exception as exc:  # any driver error means "not reachable"
        return f"{settings_dict['ENGINE']} at {settings_dict.get('HOST')}:{settings_dict.get('PORT')}: {exc}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    global _unreachable
    needs_db = [item for item in items if item.get_closest_marker("django_db")]
    if not needs_db:
        return
    _unreachable = _probe_database(config)
    if _unreachable is None:
        return
    if IN_CI:
        raise pytest.UsageError(
            f"CI=true and the test database is unreachable ({_unreachable}). "
            "Start it (scripts/start-databases.sh) — database tests are never skipped in CI."
        )
    banner = (
        "\n" + "!" * 78 + f"\n!! DATABASE NOT REACHABLE — SKIPPING {len(needs_db)} DATABASE TESTS\n"
        f"!! {_unreachable}\n!! Start it with: sudo scripts/start-databases.sh\n" + "!" * 78 + "\n"
    )
    sys.stderr.write(banner)
    marker = pytest.mark.skip(reason=f"database unreachable: {_unreachable}")
    for item in needs_db:
        item.add_marker(marker)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _unreachable:
        terminalreporter.write_sep("!", f"DATABASE TESTS SKIPPED: {_unreachable}", red=True)
    else:
        terminalreporter.write_line(f"database under test: {connection.vendor}")


@pytest.fixture
def vendor() -> str:
    """``postgresql``, ``mysql`` or ``sqlite``."""
    return connection.vendor
