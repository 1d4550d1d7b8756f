"""The job list by status, newest first: an index on ``(status, created_at)``.

The admin's job list filtered by ``status`` asks for ``WHERE status = X ORDER BY
created_at DESC LIMIT 50``, and its date hierarchy for the first and the last
``created_at`` under the same filter. Without this index each database reached the
rows another way, and on a table of millions of finished jobs that went wrong
(benchmarks/scale.md, "Admin pages, enqueue and sweep on a big table"): PostgreSQL,
with statistics taken before any job was pending, read all 100,000 pending rows
through the claim index and sorted them; MariaDB read them through
``(status, finished_at)`` for ``MIN``/``MAX``; SQLite walked ``created_at`` from the
oldest finished row.

* MariaDB and SQLite get the plain index of ``Job.Meta.indexes``.
* PostgreSQL gets ``("created_at") WHERE status = 'pending'``: the pending rows are
  the ones the list's stale statistics misjudge (finished rows are most of the table,
  so an ordered walk of ``arcature_created_idx`` finds them at once), and a job that
  is claimed or finishes writes no entry into it. Only an enqueue (and a retry or
  requeue, which make a job pending again) does. It is built ``CONCURRENTLY``, so
  adding it to a busy table does not block enqueues.

Django's migration state holds the plain index on every database, as in 0005 and
0008, so ``makemigrations --check`` stays clean and a later migration that drops it
by name works everywhere.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

NAME = "arcature_status_created_idx"
INDEX = models.Index(fields=["status", "created_at"], name=NAME)
#: The PostgreSQL index: the pending rows only, in creation order.
PARTIAL = """("created_at", "id") WHERE "status" = 'pending'"""


def add_index(apps: Any, schema_editor: Any) -> None:
    model = apps.get_model("django_arcature", "Job")
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        schema_editor.add_index(model, INDEX)
        return
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    # An invalid index that an interrupted CONCURRENTLY build left behind goes first.
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(NAME)}")
    schema_editor.execute(f"CREATE INDEX CONCURRENTLY {quote(NAME)} ON {table} {PARTIAL}")


def remove_index(apps: Any, schema_editor: Any) -> None:
    model = apps.get_model("django_arcature", "Job")
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        schema_editor.remove_index(model, INDEX)
        return
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {connection.ops.quote_name(NAME)}")


class Migration(migrations.Migration):
    # CREATE/DROP INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [("django_arcature", "0008_postgresql_storage")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="job", index=INDEX)],
            database_operations=[migrations.RunPython(add_index, remove_index, elidable=False)],
        )
    ]
