"""PostgreSQL only: the claim and sweep indexes hold live jobs only.

On a table of millions of jobs nearly every row is finished, yet the claim indexes
(led by ``status``) and the sweep index held an entry for each of them, and every
transition of every job wrote new entries into all three. As partial indexes
(``WHERE status = 'pending'`` for the two claim indexes, ``WHERE status =
'running'`` for the sweep) they hold only the few live rows: the claim and the
sweep read a small index, and a job that finishes, or is enqueued, or is claimed,
adds entries only to the indexes whose condition its new row meets.

The indexes keep their names, so Django's migration state (which still describes
the full indexes of ``Job.Meta.indexes``, as MariaDB and SQLite need them: MariaDB
has no partial indexes) names the same objects: a later migration that drops or
renames one of them works on every database. That state is not changed here (a
``RunPython`` has no state effect), so ``makemigrations --check`` stays clean.
Reversing recreates the full indexes of 0001. Each index is built ``CONCURRENTLY``
beside the one it replaces, so upgrading a busy table does not block its writers.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

PARTIAL = {
    "arcature_claim_any_idx": """("priority" DESC, "available_at") WHERE "status" = 'pending'""",
    "arcature_claim_queue_idx": (
        """("queue", "priority" DESC, "available_at") WHERE "status" = 'pending'"""
    ),
    "arcature_sweep_idx": """("lease_expires_at") WHERE "status" = 'running'""",
}

FULL = {
    "arcature_claim_any_idx": '("status", "priority" DESC, "available_at")',
    "arcature_claim_queue_idx": '("status", "queue", "priority" DESC, "available_at")',
    "arcature_sweep_idx": '("status", "lease_expires_at")',
}


def _replace(apps: Any, schema_editor: Any, definitions: dict[str, str]) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    quote = connection.ops.quote_name
    table = quote(apps.get_model("django_arcature", "Job")._meta.db_table)
    for name, definition in definitions.items():
        # Built beside the old index, then swapped in under its name: enqueues and
        # claims go on while a table of millions of rows is read, and the claim
        # never runs without an index. A build an interrupted run left behind
        # (invalid) is dropped first.
        building = quote(f"{name}_new")
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {building}")
        schema_editor.execute(f"CREATE INDEX CONCURRENTLY {building} ON {table} {definition}")
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(name)}")
        schema_editor.execute(f"ALTER INDEX {building} RENAME TO {quote(name)}")


def make_partial(apps: Any, schema_editor: Any) -> None:
    _replace(apps, schema_editor, PARTIAL)


def make_full(apps: Any, schema_editor: Any) -> None:
    _replace(apps, schema_editor, FULL)


class Migration(migrations.Migration):
    # CREATE/DROP INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [("django_arcature", "0004_job_trace_context")]

    operations = [migrations.RunPython(make_partial, make_full, elidable=False)]
