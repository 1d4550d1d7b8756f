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

# tests/thirdparty/ needs Wagtail and django-modelsearch, installed only by the
# *-thirdparty-* tox environments, which set ARCATURE_THIRDPARTY=1 and run it alone
# with its own settings. Everywhere else it is not collected; there, a missing
# package is an import error, never a skip.
collect_ignore = [] if os.environ.get("ARCATURE_THIRDPARTY") == "1" else ["thirdparty"]

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
        where = f"{settings_dict.get('HOST')}:{settings_dict.get('PORT')}"
        return f"{settings_dict['ENGINE']} at {where}: {exc}"
    return None


_deselected_by_vendor: dict[str, int] = {}


def _deselect_other_vendors(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop tests marked ``only_on(...)`` for another database, and say why at the end.

    A test that checks a PostgreSQL trigger has nothing to check on SQLite; it is
    not collected there rather than skipped, so that "skipped" in a run always
    means something went missing (and fails CI).
    """
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("only_on")
        if marker is None or connection.vendor in marker.args:
            keep.append(item)
            continue
        drop.append(item)
        reason = marker.kwargs.get("reason", "")
        key = f"only on {', '.join(marker.args)}: {reason}"
        _deselected_by_vendor[key] = _deselected_by_vendor.get(key, 0) + 1
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


#: Folders whose tests use no database at all (pure code, the import graph, the public
#: names): their answer cannot change with the database, so they run on SQLite only,
#: once per Django version, instead of again on PostgreSQL and MariaDB.
NO_DATABASE_SUITES = ("unit", "architecture")
_TESTS = os.path.dirname(os.path.abspath(__file__))


#: Set by an environment whose Django version has no SQLite environment of its own
#: (tox.ini: Django 6.0 runs on PostgreSQL alone), so that its no-database suites still
#: run once for that Django version, there.
RUN_NO_DATABASE_SUITES = os.environ.get("ARCATURE_RUN_NO_DATABASE_SUITES") == "1"


def _mark_no_database_suites(items: list[pytest.Item]) -> None:
    """Mark the tests of ``NO_DATABASE_SUITES`` ``only_on("sqlite")``, as if written there.

    A test there that asks for the database anyway (``django_db``), or that already
    names its databases with ``only_on``, keeps what it said. With
    ``ARCATURE_RUN_NO_DATABASE_SUITES=1`` nothing is marked: they run here too.
    """
    if RUN_NO_DATABASE_SUITES:
        return
    folders = tuple(os.path.join(_TESTS, name) + os.sep for name in NO_DATABASE_SUITES)
    marker = pytest.mark.only_on(
        "sqlite", reason="uses no database (tests/unit, tests/architecture): once, on SQLite"
    )
    for item in items:
        if not str(item.path).startswith(folders):
            continue
        if item.get_closest_marker("only_on") or item.get_closest_marker("django_db"):
            continue
        item.add_marker(marker)


def _deselect_server_restarts(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that restart a database server run only when asked (ARCATURE_RESTART_DATABASE=1).

    A restart drops every client of the server, so it must not run while another
    suite shares that server; ``make test`` runs it on its own after the matrix.
    """
    if os.environ.get("ARCATURE_RESTART_DATABASE") == "1":
        return
    drop = [item for item in items if item.get_closest_marker("restarts_server")]
    if drop:
        key = "that restart the server: run with ARCATURE_RESTART_DATABASE=1 (make test: in CI)"
        _deselected_by_vendor[key] = len(drop)
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if item not in drop]


#: Suites marked ``heavy`` here rather than in their own files, each with the reason no
#: older Python/Django environment adds signal to it: what it checks is the database
#: server's planner or locking, the operating system (signals, sockets, files), or a
#: tool of this repository, never something Django or Python 3.12 does differently. They
#: still run on every database, in the newest environment. Keys are paths under
#: ``tests/``, a module or ``module::test`` (every parametrisation). Kept here so that
#: the files (some of them edited by other changes at the same time) stay untouched;
#: tests/unit/test_ci_selection.py checks that every key still names a test.
HEAVY_ELSEWHERE: dict[str, str] = {
    "integration/test_fan_out_release_plan.py": (
        "the server's plan of hand-written SQL on stale statistics (10,000-node fan-out)"
    ),
    "integration/test_claim_race.py": "threads racing the hand-written claim SQL on one table",
    "integration/test_plans.py": "the server's plans of the hand-written hot statements (EXPLAIN)",
    "integration/test_admin_workflows.py::"
    "test_batch_cancel_racing_member_completions_counts_each_member_once": (
        "a race of row locks between a cancel and completions, four rounds"
    ),
    "concurrency/test_deploy_recipes.py": (
        "the deployment guide's recipes: shell, signals, PID namespaces, health files"
    ),
    "concurrency/test_wake_hints.py": "wake-up hints over Unix datagram sockets between processes",
    "faults/test_poison_completions.py": "values the server or its driver refuses, row by row",
    "faults/test_claim_keys.py": "the worker's in-flight map keyed by claim token",
    "faults/test_completion_sizes.py": "statement sizes against the server's packet limit",
    "observability/test_prometheus.py": "prometheus_client's exposition and multiprocess files",
    "observability/test_metrics_address.py": "the metrics listener's socket address",
    "architecture/test_import_graph.py": "the package's import graph, read from the source",
    "unit/test_peers_harness.py": "the peer benchmark's harness (benchmarks/peers.py)",
    "unit/test_ci_selection.py": "this file's collection rules",
}


def _heavy_key_matches(item: pytest.Item, key: str) -> bool:
    """Whether ``key`` of HEAVY_ELSEWHERE names ``item`` (its module, or its test function)."""
    module, _, function = key.partition("::")
    if str(item.path) != os.path.join(_TESTS, *module.split("/")):
        return False
    return not function or getattr(item, "originalname", item.name) == function


def _mark_heavy_elsewhere(items: list[pytest.Item]) -> None:
    """Mark the tests HEAVY_ELSEWHERE names ``heavy``, as if the marker were written there."""
    marker = pytest.mark.heavy
    for item in items:
        if item.get_closest_marker("heavy"):
            continue
        if any(_heavy_key_matches(item, key) for key in HEAVY_ELSEWHERE):
            item.add_marker(marker)


def _deselect_heavy_suites(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Suites marked ``heavy`` (property-based, fault injection, chaos, conformance,
    multi-process schedules) run where they add signal: in the newest environment
    on every database. The older Python/Django environments set
    ``ARCATURE_HEAVY_SUITES=0`` (tox.ini) and skip collecting them, which keeps CI
    inside its budget; they change nothing that differs between Django versions.
    """
    if os.environ.get("ARCATURE_HEAVY_SUITES", "1") != "0":
        return
    drop = [item for item in items if item.get_closest_marker("heavy")]
    if drop:
        key = "marked heavy: they run in the newest environment (ARCATURE_HEAVY_SUITES=0 here)"
        _deselected_by_vendor[key] = len(drop)
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if item not in drop]


BEHIND_PGBOUNCER = os.environ.get("ARCATURE_PGBOUNCER") == "1"


def _deselect_by_pooler(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``pgbouncer(True)`` tests run only behind PgBouncer (ARCATURE_PGBOUNCER=1),
    ``pgbouncer(False)`` ones only on a direct connection; neither is skipped."""
    drop = []
    for item in items:
        marker = item.get_closest_marker("pgbouncer")
        if marker is not None and bool(marker.args[0]) != BEHIND_PGBOUNCER:
            drop.append(item)
            where = "behind PgBouncer" if marker.args[0] else "on a direct connection"
            key = f"only {where}: {marker.kwargs.get('reason', '')}"
            _deselected_by_vendor[key] = _deselected_by_vendor.get(key, 0) + 1
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if item not in drop]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    global _unreachable
    _mark_no_database_suites(items)
    _mark_heavy_elsewhere(items)
    _deselect_other_vendors(config, items)
    _deselect_server_restarts(config, items)
    _deselect_heavy_suites(config, items)
    _deselect_by_pooler(config, items)
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


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    if _unreachable:
        terminalreporter.write_sep("!", f"DATABASE TESTS SKIPPED: {_unreachable}", red=True)
    else:
        terminalreporter.write_line(f"database under test: {connection.vendor}")
    for reason, count in sorted(_deselected_by_vendor.items()):
        terminalreporter.write_line(
            f"not collected on {connection.vendor}: {count} test(s) {reason}"
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI a skipped test is a failure: it means a server, a browser or a
    package that the run should have had was missing."""
    if not IN_CI:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if skipped and session.exitstatus == 0:
        sys.stderr.write(f"\nCI=true: {skipped} test(s) were skipped; failing the run.\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def vendor() -> str:
    """``postgresql``, ``mysql`` or ``sqlite``."""
    return connection.vendor


@pytest.fixture(autouse=True)
def _close_wait_listeners() -> Any:
    """A test's ``job.wait()`` leaves a LISTEN connection open for a while: close it, or
    the next test (or dropping the test database) finds it still connected."""
    yield
    module = sys.modules.get("django_arcature.workflows.done_listener")
    if module is not None:
        module.close_all()


@pytest.fixture(autouse=True)
def _no_flush_history() -> None:
    """Each test's first ``plain_alone`` flush tries the plain jobs' statement: a flush of
    members only in an earlier test would otherwise send it straight to the members'
    transaction (``completions._members_last``, a hint kept per process)."""
    module = sys.modules.get("django_arcature.manager.completions")
    if module is not None:
        module._members_last.clear()
