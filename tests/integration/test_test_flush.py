"""The suite's flush between transactional tests on PostgreSQL (tests/conftest.py).

It deletes the rows instead of truncating the tables, for speed; these tests show it
still leaves every table empty, rows that reference each other included, and that a
flush asked to reset sequences still truncates.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command
from django.core.management.color import no_style
from django.db import connection

from django_arcature.models import Job

pytestmark = [
    pytest.mark.only_on("postgresql", reason="the suite flushes by DELETE on PostgreSQL only"),
    pytest.mark.django_db(transaction=True),
]


def test_the_flush_deletes_rows_and_keeps_truncate_for_a_sequence_reset() -> None:
    tables = ["django_arcature_job", "auth_user"]
    plain = connection.ops.sql_flush(no_style(), tables)
    assert plain == ['DELETE FROM "django_arcature_job";', 'DELETE FROM "auth_user";']
    reset = connection.ops.sql_flush(no_style(), tables, reset_sequences=True)
    assert any(statement.startswith("TRUNCATE") for statement in reset), reset


def test_a_flush_empties_every_table_whatever_refers_to_what() -> None:
    Job.objects.enqueue("tests.noop")
    group = Group.objects.create(name="operators")
    group.permissions.add(Permission.objects.get(codename="view_job"))
    User.objects.create(username="ops").groups.add(group)
    # auth_group comes before auth_user_groups, which refers to it: the foreign keys
    # are checked at the commit, when both are empty.
    call_command("flush", verbosity=0, interactive=False, inhibit_post_migrate=True)
    tables = connection.introspection.django_table_names(only_existing=True)
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")
            assert cursor.fetchone() == (0,), table
