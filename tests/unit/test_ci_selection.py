"""Which tests a run collects on which database (tests/conftest.py).

CI's budget depends on these rules, and so does its coverage: a test of
``tests/unit`` or ``tests/architecture`` runs on SQLite only (it uses no database,
so PostgreSQL and MariaDB would only repeat it), unless it asks for the database or
names its own databases. Each case runs pytest's collection in a subprocess with
the database chosen by ``ARCATURE_TEST_DB``; collection alone connects to nothing
when no collected test needs the database.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What this process's environment may set that would change the collection asked for.
INHERITED_SWITCHES = {"DATABASE_URL", "CI", "ARCATURE_RUN_NO_DATABASE_SUITES"}


def collect(
    database: str, *paths: str, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if k not in INHERITED_SWITCHES},
        "ARCATURE_TEST_DB": database,
        "ARCATURE_DB_NAME": "arcature_collect_only",
        **(env_extra or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def collected(output: str) -> list[str]:
    return [line for line in output.splitlines() if "::" in line]


def test_the_no_database_suites_are_collected_on_sqlite() -> None:
    done = collect("sqlite", "tests/unit/test_decide.py", "tests/architecture/test_public_api.py")
    assert done.returncode == 0, done.stdout + done.stderr
    names = collected(done.stdout)
    assert any(name.startswith("tests/unit/test_decide.py::") for name in names)
    assert any(name.startswith("tests/architecture/test_public_api.py::") for name in names)


def servers_this_environment_can_load() -> list[tuple[str, str]]:
    """PostgreSQL always (psycopg is in every environment); MariaDB where mysqlclient is
    installed: Django's backend imports it at settings time, and only the newest
    environment installs it (tox.ini)."""
    servers = [("postgres", "postgresql")]
    if importlib.util.find_spec("MySQLdb") is not None:
        servers.append(("mysql", "mysql"))
    return servers


def test_the_no_database_suites_are_not_collected_on_the_servers_and_it_says_so() -> None:
    for database, vendor in servers_this_environment_can_load():
        done = collect(database, "tests/unit/test_decide.py", "tests/architecture")
        # pytest's "no tests collected" (5): every test was deselected, none skipped.
        assert done.returncode == 5, done.stdout + done.stderr
        assert collected(done.stdout) == [], done.stdout
        assert f"not collected on {vendor}:" in done.stdout, done.stdout
        assert "uses no database (tests/unit, tests/architecture)" in done.stdout


def test_an_environment_without_sqlite_can_collect_the_no_database_suites_on_its_server() -> None:
    """Django 6.0 runs on PostgreSQL alone (tox.ini): its unit and architecture suites
    are collected there when ``ARCATURE_RUN_NO_DATABASE_SUITES=1``, and not otherwise."""
    paths = ("tests/unit/test_decide.py", "tests/architecture/test_public_api.py")
    done = collect("postgres", *paths, env_extra={"ARCATURE_RUN_NO_DATABASE_SUITES": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    names = collected(done.stdout)
    assert any(name.startswith("tests/unit/test_decide.py::") for name in names)
    assert any(name.startswith("tests/architecture/test_public_api.py::") for name in names)
    assert "uses no database (tests/unit, tests/architecture)" not in done.stdout


def test_every_heavy_elsewhere_key_still_names_a_test() -> None:
    """A renamed file or test would silently fall out of the table: it must fail here."""
    from tests.conftest import HEAVY_ELSEWHERE

    for key in HEAVY_ELSEWHERE:
        module, _, function = key.partition("::")
        source = ROOT / "tests" / module
        assert source.is_file(), key
        if function:
            assert f"def {function}(" in source.read_text(), key


def test_heavy_elsewhere_is_collected_in_the_newest_environment_only() -> None:
    """The older environments (``ARCATURE_HEAVY_SUITES=0``) leave out the modules and the
    single tests HEAVY_ELSEWHERE names, and say so; the newest one collects them."""
    paths = ("tests/integration/test_admin_workflows.py",)
    racing = "test_batch_cancel_racing_member_completions_counts_each_member_once"
    newest = collect("postgres", *paths, env_extra={"ARCATURE_HEAVY_SUITES": "1"})
    older = collect("postgres", *paths, env_extra={"ARCATURE_HEAVY_SUITES": "0"})
    for done in (newest, older):
        assert done.returncode == 0, done.stdout + done.stderr
    newest_names, older_names = collected(newest.stdout), collected(older.stdout)
    assert any(racing in name for name in newest_names), newest.stdout
    assert not any(racing in name for name in older_names), older.stdout
    # The rest of the file is still collected there.
    assert any("test_admin_workflows.py::" in name for name in older_names), older.stdout
    assert "marked heavy: they run in the newest environment" in older.stdout
