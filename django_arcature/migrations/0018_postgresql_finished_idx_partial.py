"""PostgreSQL only: ``arcature_finished_idx`` no longer holds the pending jobs.

``(status, finished_at)`` serves the dead-letter page (``status = 'dead'`` newest
first), the dashboard's counts of the last hour (``status IN (finished …) AND
finished_at`` in a range) and prune (``status = X AND finished_at < cutoff``). None
of them reads a pending row, yet every enqueued job wrote an entry into it: in a bulk
enqueue, one of the seven index entries per row (benchmarks/enqueue_bulk.py, the
server's CPU for a COPY of 1,000 of our rows: 8.5 ms as migrated, 7.5 ms with this
index partial; benchmarks/README.md). As a partial index it leaves out the rows that
are pending with no finish time, which is every pending row: a retry (running back to
pending) and a requeue write no entry either.

The condition is ``finished_at IS NOT NULL OR status <> 'pending'``, so that the
planner proves it from each of those queries: from a finish time compared with
anything (a generic plan's parameter too: the comparison is strict), or from a
status equal to (or in a list of) values other than ``'pending'``.

The index keeps its name, so Django's migration state (the full index of
``Job.Meta.indexes``, which MariaDB and SQLite keep) names the same object, as in 0005
and 0009; ``makemigrations --check`` stays clean. It is built ``CONCURRENTLY`` beside
the one it replaces, then swapped in under its name, so a busy table keeps taking
enqueues and the admin's queries always have an index. Reversing rebuilds the full one.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

NAME = "arcature_finished_idx"
#: The PostgreSQL index: every row that has finished or is not pending.
PARTIAL = """("status", "finished_at") WHERE "finished_at" IS NOT NULL OR "status" <> 'pending'"""
FULL = '("status", "finished_at")'


def _replace(apps: Any, schema_editor: Any, definition: str) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    quote = connection.ops.quote_name
    table = quote(apps.get_model("django_arcature", "Job")._meta.db_table)
    building = quote(f"{NAME}_new")
    # A build an interrupted run left behind (invalid) goes first.
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {building}")
    schema_editor.execute(f"CREATE INDEX CONCURRENTLY {building} ON {table} {definition}")
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(NAME)}")
    schema_editor.execute(f"ALTER INDEX {building} RENAME TO {quote(NAME)}")


def make_partial(apps: Any, schema_editor: Any) -> None:
    _replace(apps, schema_editor, PARTIAL)


def make_full(apps: Any, schema_editor: Any) -> None:
    _replace(apps, schema_editor, FULL)


class Migration(migrations.Migration):
    # CREATE/DROP INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [("django_arcature", "0017_edge_sole")]

    operations = [migrations.RunPython(make_partial, make_full, elidable=False)]
