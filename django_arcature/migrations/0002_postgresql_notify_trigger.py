"""PostgreSQL only: wake idle workers when jobs are inserted.

A statement-level trigger sends ``NOTIFY arcature_jobs`` once per INSERT
statement (a bulk insert of 10,000 rows sends one), and PostgreSQL delivers it
only when the enqueueing transaction commits: a rolled-back enqueue wakes
nobody, and a worker never wakes before the row is visible. Costs the enqueue
no extra round trip. Other databases have no such channel; their workers poll.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

CHANNEL = "arcature_jobs"

CREATE = f"""
CREATE OR REPLACE FUNCTION arcature_notify_inserted() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', '');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS arcature_notify_inserted ON django_arcature_job;
CREATE TRIGGER arcature_notify_inserted
    AFTER INSERT ON django_arcature_job
    FOR EACH STATEMENT EXECUTE FUNCTION arcature_notify_inserted();
"""

DROP = """
DROP TRIGGER IF EXISTS arcature_notify_inserted ON django_arcature_job;
DROP FUNCTION IF EXISTS arcature_notify_inserted();
"""


def create_trigger(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop_trigger(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("django_arcature", "0001_initial")]

    operations = [migrations.RunPython(create_trigger, drop_trigger, elidable=False)]
