"""An enqueue on a database a Django test case does not list is refused, as every
other query there is, on an open connection too.

Found following docs/howto/jobs-database.md with Django's test runner: on PostgreSQL
the single-row INSERT used a cursor kept on the connection, made around
``connection.cursor()``, which Django's test cases replace for the aliases a test
does not list. On an already open connection the INSERT was neither refused nor
inside a test transaction: the job stayed in the test database, and the next test's
``drain()`` ran it (two jobs where the test enqueued one).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections
from django.test import SimpleTestCase

from django_arcature.models import Job

pytestmark = pytest.mark.django_db

REFUSED = "Database queries to 'default' are not allowed"


class _ListsNoDatabase(SimpleTestCase):
    """Only for its guard: what Django installs for a test case's unlisted aliases."""

    databases: set[str] = set()


#: Its private guard methods, which django-stubs does not declare.
GUARD: Any = _ListsNoDatabase


@pytest.fixture
def guarded() -> Iterator[None]:
    """The connection open, then Django's guard on it, as in a test case that does
    not list the alias after an earlier test (or the test database's creation)
    opened it."""
    connection.ensure_connection()
    GUARD._add_databases_failures()
    try:
        yield
    finally:
        GUARD._remove_databases_failures()


@pytest.mark.usefixtures("guarded")
def test_enqueue_is_refused() -> None:
    with pytest.raises(AssertionError, match=REFUSED):
        Job.objects.enqueue("tests.noop")


@pytest.mark.usefixtures("guarded")
def test_enqueue_through_a_preparing_cursor_is_refused() -> None:
    # OPTIONS["prepare_threshold"] has the PostgreSQL INSERT go through a cursor of
    # psycopg's server-binding class, made around connection.cursor() as well.
    options = connection.settings_dict.setdefault("OPTIONS", {})
    options["prepare_threshold"] = 5
    try:
        with pytest.raises(AssertionError, match=REFUSED):
            Job.objects.enqueue("tests.noop")
    finally:
        del options["prepare_threshold"]


def test_the_same_enqueue_works_once_the_guard_is_gone() -> None:
    GUARD._add_databases_failures()
    GUARD._remove_databases_failures()  # leaves the bound method in place
    job = Job.objects.enqueue("tests.noop")
    assert Job.objects.filter(pk=job.pk).exists()
    if connection.vendor == "postgresql":  # and the kept cursor is used again
        assert "_arcature_insert_cursor" in connections["default"].__dict__
