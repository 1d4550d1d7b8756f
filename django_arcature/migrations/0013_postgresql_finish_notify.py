"""PostgreSQL only: tell a waiter its job finished, and a worker its running job was cancelled.

``job.wait()`` on PostgreSQL LISTENs on ``arcature_done`` and marks the job it
waits for (``arcature_waited``, a column only PostgreSQL has and Django does not
map). A row trigger whose ``WHEN`` clause reads that mark sends
``NOTIFY arcature_done, '<job id>'`` when the job reaches a finished state, in
the transaction that finished it (delivered at its commit). A job nobody waits
for fails the ``WHEN`` test inside the executor: no function call, no
notification, no queue entry; that is what "costs nothing while no one waits"
means here. The column is added with a constant default, which PostgreSQL 11+
stores in the catalogue: no table rewrite.

A second row trigger sends ``NOTIFY arcature_jobs, 'cancel:<job id>'`` when a
*running* job is cancelled (by an operator, its workflow or its batch), so the
worker holding it runs its fenced heartbeat at once and raises
``current_job().cancel_requested`` without waiting for the next heartbeat.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

DONE_CHANNEL = "arcature_done"
JOBS_CHANNEL = "arcature_jobs"
TABLE = "django_arcature_job"

CREATE = f"""
ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS arcature_waited boolean NOT NULL DEFAULT false;

CREATE OR REPLACE FUNCTION arcature_notify_finished() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('{DONE_CHANNEL}', NEW.id::text);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS arcature_notify_finished ON {TABLE};
CREATE TRIGGER arcature_notify_finished
    AFTER UPDATE OF status ON {TABLE}
    FOR EACH ROW
    WHEN (NEW.arcature_waited
          AND NEW.status IN ('succeeded', 'dead', 'cancelled')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION arcature_notify_finished();

CREATE OR REPLACE FUNCTION arcature_notify_cancelled() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('{JOBS_CHANNEL}', 'cancel:' || NEW.id::text);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS arcature_notify_cancelled ON {TABLE};
CREATE TRIGGER arcature_notify_cancelled
    AFTER UPDATE OF status ON {TABLE}
    FOR EACH ROW
    WHEN (OLD.status = 'running' AND NEW.status = 'cancelled')
    EXECUTE FUNCTION arcature_notify_cancelled();
"""

DROP = f"""
DROP TRIGGER IF EXISTS arcature_notify_cancelled ON {TABLE};
DROP FUNCTION IF EXISTS arcature_notify_cancelled();
DROP TRIGGER IF EXISTS arcature_notify_finished ON {TABLE};
DROP FUNCTION IF EXISTS arcature_notify_finished();
ALTER TABLE {TABLE} DROP COLUMN IF EXISTS arcature_waited;
"""


def create_triggers(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop_triggers(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("django_arcature", "0012_workflows")]

    operations = [migrations.RunPython(create_triggers, drop_triggers, elidable=False)]
