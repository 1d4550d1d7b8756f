"""Schedules (issue 19): ``created_at`` on the database's clock, and ``enabled_at``.

* ``created_at`` gets a database default, the server's now in UTC (the same SQL
  the leases use), instead of the app server's clock: a schedule's first window
  starts there, and an app server whose clock runs behind would have fired slots
  from before the schedule existed. Rows inserted by any client get it too.
* ``enabled_at`` records when a disabled schedule was enabled again; the window
  of due slots never starts before it, so disabled time is not missed time.

Both are plain column changes on every database (no data to move): existing
rows keep their ``created_at``, and their ``enabled_at`` is empty.
"""

from __future__ import annotations

from django.db import migrations, models

import django_arcature.db.clock


class Migration(migrations.Migration):
    dependencies = [
        ("django_arcature", "0009_job_status_created_idx"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="enabled_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="enabled at"),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="created_at",
            field=models.DateTimeField(
                db_default=django_arcature.db.clock.DatabaseNow(), verbose_name="created at"
            ),
        ),
    ]
