"""System checks stop a bad configuration at startup and say what to write instead."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_arcature.checks.settings import database_messages
from django_arcature.checks.writers import writer_messages


def arcature_messages(**kwargs: object) -> list[checks.CheckMessage]:
    return [m for m in checks.run_checks(**kwargs) if str(m.id).startswith("arcature.")]  # type: ignore[arg-type]


def test_the_test_settings_pass_every_check() -> None:
    assert arcature_messages() == []
    out = io.StringIO()
    call_command("check", stdout=out)
    assert "no issues" in out.getvalue()


@pytest.mark.django_db
def test_the_test_settings_pass_the_database_checks_too() -> None:
    assert arcature_messages(databases=["default"]) == []


@pytest.mark.parametrize(
    ("arcature", "says"),
    [
        ({"LEASE_SECONDS": 0}, "ARCATURE['LEASE_SECONDS'] = 0 is invalid: use a whole number"),
        ({"LEASE_SECONDS": 0.5}, "ARCATURE['LEASE_SECONDS'] = 0.5 is invalid: use a whole number"),
        ({"POLL_INTERVAL": -1}, "ARCATURE['POLL_INTERVAL'] = -1 is invalid: use a number"),
        ({"LEASE_SECONDSS": 30}, "Did you mean 'LEASE_SECONDS'?"),
        ({"BOGUS": 1}, "ARCATURE['BOGUS'] is not a known setting. Known keys: "),
        ({"MAX_ATTEMPTS": 0}, "ARCATURE['MAX_ATTEMPTS'] = 0 is invalid: use a whole number"),
        ({"RETRY_BASE_SECONDS": 60, "RETRY_MAX_SECONDS": 10}, "raise the cap or lower the base"),
    ],
)
def test_bad_setting_fails_check_with_what_to_change(arcature: object, says: str) -> None:
    with override_settings(ARCATURE=arcature):
        (message,) = arcature_messages()
        assert message.id == "arcature.E001"
        assert message.level == checks.ERROR
        assert says in message.msg
        # An installed package has no docs/ folder: the hint names the page instead.
        assert "docs/" not in str(message.hint)
        assert "“Settings” page" in str(message.hint)
        with pytest.raises(SystemCheckError, match=r"arcature\.E001") as failed:
            call_command("check", stdout=io.StringIO(), stderr=io.StringIO())
        assert says in str(failed.value)


def test_every_problem_is_one_message() -> None:
    with override_settings(ARCATURE={"LEASE_SECONDS": 0, "POLL_INTERVAL": -1, "NOPE": 1}):
        assert len(arcature_messages()) == 3


def test_settings_not_a_dict() -> None:
    with override_settings(ARCATURE=["LEASE_SECONDS", 3]):
        (message,) = arcature_messages()
    assert message.msg == "ARCATURE must be a dict, not list."


# --- Database options (checked on the settings, so no DATABASES swap is needed) ----------

FILE_IMMEDIATE = {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": "/srv/app/db.sqlite3",
    "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
}
MODERN = (3, 45, 1)


def ids(messages: list[checks.CheckMessage]) -> list[str]:
    return [str(m.id) for m in messages]


def test_sqlite_file_in_immediate_mode_is_fine() -> None:
    assert database_messages({"default": FILE_IMMEDIATE}, MODERN) == []


def test_sqlite_in_memory_is_a_warning() -> None:
    for name in (":memory:", "", "file:jobs?mode=memory&cache=shared"):
        config = {**FILE_IMMEDIATE, "NAME": name}
        messages = database_messages({"default": config}, MODERN)
        assert ids(messages) == ["arcature.W001"]
        assert "worker processes cannot see its jobs" in messages[0].msg


def test_sqlite_deferred_transactions_are_a_deployment_warning_that_says_when_it_matters() -> None:
    config = {**FILE_IMMEDIATE, "OPTIONS": {}}
    assert database_messages({"jobs": config}, MODERN) == []  # not on every command
    (message,) = writer_messages({"jobs": config})
    assert message.id == "arcature.W002"
    assert "once two processes write at the same time" in message.msg
    assert "One process alone is not affected" in message.msg
    assert "DATABASES['jobs']['OPTIONS'] = {'transaction_mode': 'IMMEDIATE'" in str(message.hint)
    assert writer_messages({"jobs": FILE_IMMEDIATE}) == []
    server = {"ENGINE": "django.db.backends.postgresql", "NAME": "app"}
    assert writer_messages({"default": server}) == []


def test_the_writers_check_runs_with_check_deploy_only() -> None:
    from django_arcature.checks.writers import check_sqlite_writers

    assert check_sqlite_writers in checks.registry.registry.get_checks(
        include_deployment_checks=True
    )
    assert check_sqlite_writers not in checks.registry.registry.get_checks()


def test_old_sqlite_is_an_error() -> None:
    (message,) = database_messages({"default": FILE_IMMEDIATE}, (3, 31, 1))
    assert message.id == "arcature.E002"
    assert message.level == checks.ERROR
    assert "SQLite 3.31.1 is too old" in message.msg


def test_other_databases_are_not_judged_here() -> None:
    config = {"ENGINE": "django.db.backends.postgresql", "NAME": "app"}
    assert database_messages({"default": config, "other": {}}, MODERN) == []


def test_database_checks_run_with_a_plain_manage_py_check() -> None:
    """Not tagged ``database``: ``manage.py check`` and ``runserver`` show them."""
    registered = checks.registry.registry.get_checks()
    from django_arcature.checks import settings as arcature_checks

    ours = [c for c in registered if c is arcature_checks.check_databases]
    assert ours
    assert "database" not in getattr(ours[0], "tags", ())


def test_the_test_runners_in_memory_database_is_not_a_warning() -> None:
    """`manage.py test` on SQLite puts Django's in-memory test database in DATABASES
    and then runs the checks: a new project's every test run warned W001."""
    from django.db.backends.sqlite3.base import DatabaseWrapper

    for alias in ("default", "jobs"):
        wrapper = DatabaseWrapper({"NAME": "db.sqlite3", "TEST": {"NAME": None}}, alias=alias)
        test_name = wrapper.creation._get_test_db_name()  # type: ignore[attr-defined]
        assert "mode=memory" in test_name  # what Django's runner uses when TEST NAME is unset
        assert database_messages({alias: {**FILE_IMMEDIATE, "NAME": test_name}}, MODERN) == []
        # Another alias's name, or one written in settings, still warns.
        other = {"other": {**FILE_IMMEDIATE, "NAME": test_name}}
        assert ids(database_messages(other, MODERN)) == ["arcature.W001"]


def test_an_in_memory_alias_without_the_job_table_is_not_a_warning() -> None:
    """docs/howto/jobs-database.md's layout with an in-memory SQLite ``default``: W001
    said the workers could not see "its jobs", which were on ``jobs``."""
    memory: dict[str, Any] = {**FILE_IMMEDIATE, "NAME": ":memory:"}
    server: dict[str, Any] = {"ENGINE": "django.db.backends.postgresql", "NAME": "jobs"}
    both = {"default": memory, "jobs": server}
    assert database_messages(both, MODERN, "jobs") == []
    assert ids(database_messages({"default": server, "jobs": memory}, MODERN, "jobs")) == [
        "arcature.W001"
    ]
