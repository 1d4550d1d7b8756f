"""PostgreSQL only: room on each page for heartbeats, and autovacuum sized for a queue.

A heartbeat is the one frequent update that changes no status: it sets
``locked_at``, ``lease_seconds`` and ``lease_expires_at``. PostgreSQL can write such
an update as a HOT update (the new row version on the same page, no index entry
written) only when no index holds a column it changes — a partial index's
predicate counts too — and the page has room for the new version. Until now the
sweep index of 0005, ``(lease_expires_at) WHERE status = 'running'``, held the
lease, so not one heartbeat was HOT (benchmarks/scale.md, "HOT updates").

* The sweep index becomes ``("id") WHERE status = 'running'``: it still holds only
  the running jobs (workers x (threads + claim batch), a few thousand at most), and
  the sweep reads all of them through it and keeps those whose lease has expired.
  No index holds a heartbeat's columns any more.
* ``fillfactor`` leaves room on each page that new rows do not take, for the
  heartbeat's new row versions (and the claim's and completion's, which then stay
  on their page too). It applies to pages filled from now on; existing pages keep
  their rows until they are rewritten. ``ALTER TABLE … SET`` of these options takes
  a lock that lets reads and writes go on, and rewrites nothing.
* The autovacuum thresholds follow the dead rows instead of the table's size. With
  the server's defaults (20% of the table for a vacuum, 10% for an analyze), a table
  of 10,000,000 finished jobs is vacuumed after 2,000,000 dead rows, while the live
  part of it — a few thousand rows — is rewritten many times a second.

The values and what they bought are measured in benchmarks/scale.md (section
"HOT updates and bloat", ``benchmarks/churn.py``).

The index keeps its name, and Django's migration state (the full
``("status", "lease_expires_at")`` index of ``Job.Meta.indexes``, which MariaDB and
SQLite keep) is not changed, as in 0005: ``makemigrations --check`` stays clean.
Reversing resets the table's options and rebuilds 0005's partial index. Each index
is built ``CONCURRENTLY`` beside the one it replaces.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

SWEEP_INDEX = "arcature_sweep_idx"
#: The sweep index without the lease: the sweep filters the expiry of the few running rows.
SWEEP_WITHOUT_LEASE = """("id") WHERE "status" = 'running'"""
#: 0005's sweep index, restored when this migration is reversed.
SWEEP_BY_LEASE = """("lease_expires_at") WHERE "status" = 'running'"""

#: The job table's storage parameters (``ALTER TABLE … SET``); each is reset on reversal.
STORAGE = {
    # A tenth of each page left free when rows are inserted: room for a claimed
    # row's heartbeats to stay on their page.
    "fillfactor": 90,
    # Vacuum after 1,000 dead rows plus 1% of the table (not 50 + 20%), and analyze
    # after 1,000 changed rows plus 1% (not 50 + 10%): both track the queue's churn,
    # not the pile of finished rows.
    "autovacuum_vacuum_threshold": 1000,
    "autovacuum_vacuum_scale_factor": 0.01,
    "autovacuum_analyze_threshold": 1000,
    "autovacuum_analyze_scale_factor": 0.01,
    # Inserted rows count as work for the vacuum too (to set their pages
    # all-visible): after 10,000 inserts plus 1% of the table, not 1,000 + 20%.
    "autovacuum_vacuum_insert_threshold": 10000,
    "autovacuum_vacuum_insert_scale_factor": 0.01,
}


def _table(apps: Any, schema_editor: Any) -> str:
    model = apps.get_model("django_arcature", "Job")
    return str(schema_editor.connection.ops.quote_name(model._meta.db_table))


def _rebuild_sweep(schema_editor: Any, table: str, definition: str) -> None:
    # Built beside the old index, then swapped in under its name, as in 0005: the
    # sweep never runs without an index, and writers are not blocked meanwhile.
    quote = schema_editor.connection.ops.quote_name
    building = quote(f"{SWEEP_INDEX}_new")
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {building}")
    schema_editor.execute(f"CREATE INDEX CONCURRENTLY {building} ON {table} {definition}")
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(SWEEP_INDEX)}")
    schema_editor.execute(f"ALTER INDEX {building} RENAME TO {quote(SWEEP_INDEX)}")


def apply_storage(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = _table(apps, schema_editor)
    options = ", ".join(f"{name} = {value}" for name, value in STORAGE.items())
    schema_editor.execute(f"ALTER TABLE {table} SET ({options})")
    _rebuild_sweep(schema_editor, table, SWEEP_WITHOUT_LEASE)


def reset_storage(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = _table(apps, schema_editor)
    schema_editor.execute(f"ALTER TABLE {table} RESET ({', '.join(STORAGE)})")
    _rebuild_sweep(schema_editor, table, SWEEP_BY_LEASE)


class Migration(migrations.Migration):
    # CREATE/DROP INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [("django_arcature", "0007_schedules_and_queues")]

    operations = [migrations.RunPython(apply_storage, reset_storage, elidable=False)]
