"""A bad ARCATURE setting stops ``manage.py arcature_worker`` before it touches a job,
with the system check's message saying what to change (not a traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


# Every test here runs a command on a SQLite file of its own (see run_command), so
# on PostgreSQL or MariaDB it would repeat the same runs; the checks it exercises
# read settings, not the database.
pytestmark = pytest.mark.only_on(
    "sqlite", reason="it runs its own project on a SQLite file, whatever the database under test"
)


def run_worker(settings: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_command(settings, "arcature_worker", *args)


def run_command(settings: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": settings,
        "PYTHONPATH": str(ROOT),
        # The checks stop the command before any job is touched; a SQLite file keeps
        # the test free of a server database that only the test run creates.
        "DATABASE_URL": f"sqlite:///{ROOT / 'var' / 'bad-settings.sqlite3'}",
    }
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_bad_setting_stops_the_worker_with_what_to_change() -> None:
    finished = run_worker("tests.testapp.bad_settings", "--burst")

    assert finished.returncode == 1
    assert "Traceback" not in finished.stderr
    assert "(arcature.E001) ARCATURE['LEASE_SECONDS'] = 0 is invalid" in finished.stderr
    assert "use a whole number of seconds from 1" in finished.stderr
    assert "ARCATURE['POLL_INTERVL'] is not a known setting" in finished.stderr
    assert "Did you mean 'POLL_INTERVAL'?" in finished.stderr


def test_help_still_reads_with_a_bad_setting() -> None:
    finished = run_worker("tests.testapp.bad_settings", "--help")

    assert finished.returncode == 0, finished.stderr
    assert "--shutdown-timeout SECONDS" in finished.stdout
    assert "Default: 30." in finished.stdout


def test_periodic_without_cronsim_stops_the_worker_and_the_check() -> None:
    """``arcature.E030`` depends on the ``jobs`` modules having been imported, and
    Django runs the checks in no fixed order: the check must import them itself,
    or the worker starts and fails its duties every half second instead."""
    for command in (["arcature_worker", "--burst"], ["check"]):
        finished = run_command("tests.testapp.no_cron_settings", *command)

        assert finished.returncode == 1, (command, finished.stderr)
        assert "Traceback" not in finished.stderr
        assert "(arcature.E030) @periodic schedules are declared (periodic-app-nightly)" in (
            finished.stderr
        )
        assert "django-arcature[schedules]" in finished.stderr


def test_the_cron_library_check_finds_schedules_on_its_own() -> None:
    """The same, without luck in the order: in a fresh process where nothing has
    imported the ``jobs`` modules yet, the check alone still sees the declaration."""
    finished = run_command(
        "tests.testapp.no_cron_settings",
        "shell",
        "-c",
        "from django_arcature.schedules.checks import check_cron_library; "
        "print([m.id for m in check_cron_library()])",
    )

    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip().splitlines()[-1] == "['arcature.E030']"


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--lease", "700000", "argument --lease: must be from 1 to 604800"),
        ("--concurrency", "5000", "argument --concurrency: must be from 1 to 1024"),
        ("--batch", "20000", "argument --batch: must be from 1 to 10000"),
        ("--poll-interval", "99999", "argument --poll-interval: must be above 0, up to 3600"),
        ("--shutdown-timeout", "999999", "argument --shutdown-timeout: must be from 0 to 86400"),
        ("--queue", "", "argument --queue: "),
        ("--exclude-queue", " x", "argument --exclude-queue: "),
    ],
)
def test_a_worker_option_outside_its_settings_range_is_refused(
    option: str, value: str, says: str
) -> None:
    """Each option overrides its ``ARCATURE`` key for one process, so it is held to
    the key's range: beyond it the worker either ran with a value the settings
    refuse (5000 threads, an empty queue name serving nothing) or ended in a
    traceback (a lease over a week)."""
    finished = run_worker("tests.settings", "--burst", option, value)

    assert finished.returncode == 2, finished.stderr
    assert says in finished.stderr
    assert "Traceback" not in finished.stderr


@pytest.mark.parametrize("command", ["arcature_worker", "arcature_status", "arcature_prune"])
def test_an_unknown_database_alias_is_refused_in_one_line(command: str) -> None:
    finished = run_command("tests.settings", command, "--database", "nope")

    assert finished.returncode != 0
    assert "Traceback" not in finished.stderr, finished.stderr
    assert "--database: 'nope' is not an entry of DATABASES (default)" in finished.stderr


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["arcature_prune", "--batch-size", "99999999"], "--batch-size: must be from 1 to 10000"),
        (["arcature_prune", "--batch-size", "0"], "--batch-size: must be from 1 to 10000"),
        (["arcature_prune", "--queue", ""], "argument --queue: "),
        (["arcature_status", "--since", "-1"], "--since: must be a number of minutes above 0"),
        (["arcature_schedules", "--next", "-1"], "--next: must be from 0 to 1000"),
    ],
)
def test_the_other_commands_refuse_an_option_out_of_range(command: list[str], says: str) -> None:
    finished = run_command("tests.settings", *command)

    assert finished.returncode == 2, finished.stderr
    assert says in finished.stderr
