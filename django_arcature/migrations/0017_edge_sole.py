"""``WorkflowEdge.sole``: whether an edge is the only one into its dependent.

One boolean column with a database default (false): on PostgreSQL (11+) and MariaDB
(instant ADD COLUMN) a change of the catalogue only, on SQLite a plain ``ALTER TABLE
… ADD COLUMN``; no row is rewritten. Edges written before it read false, which sends
their dependents through the general path (lock, then probe the edges), as before.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_arcature", "0016_batch_callback_jobs")]

    operations = [
        migrations.AddField(
            model_name="workflowedge",
            name="sole",
            field=models.BooleanField(db_default=False, default=False),
        ),
    ]
