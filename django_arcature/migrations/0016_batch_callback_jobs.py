"""The ids of a batch's callback jobs, stored when they are enqueued.

Two nullable columns with no default and no index: on PostgreSQL and MariaDB
(instant ADD COLUMN) a change of the catalogue only, and on SQLite a plain
``ALTER TABLE … ADD COLUMN``; no row is rewritten or read. Batches fired before
this migration keep nulls (the admin then finds their callbacks by time, as before).

Depends on 0014: 0015 and 0016 are other branches' and the dependency is re-pointed
to the newest of them when they are merged.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_arcature", "0015_edge_down_state_idx")]

    operations = [
        migrations.AddField(
            model_name="batchrun",
            name="on_success_job_id",
            field=models.UUIDField(blank=True, null=True, verbose_name="on success job"),
        ),
        migrations.AddField(
            model_name="batchrun",
            name="on_finish_job_id",
            field=models.UUIDField(blank=True, null=True, verbose_name="on finish job"),
        ),
    ]
