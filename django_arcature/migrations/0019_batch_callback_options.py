"""Each batch callback's ``.using()`` options, stored with its task name.

``Batch(on_success=notify.using(queue="high"))`` enqueued ``notify`` on its
handler's default queue: only the name was stored. One JSON column on the batch
table, added with a constant default (``{}``): batches made before it fire their
callbacks without options, as they did. The batch table holds one row per
batch, so even where adding the column copies the table (MariaDB, for the JSON
check) it is a small one.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_arcature", "0018_postgresql_finished_idx_partial")]

    operations = [
        migrations.AddField(
            model_name="batchrun",
            name="callback_options",
            field=models.JSONField(
                blank=True, default=dict, editable=False, verbose_name="callback options"
            ),
        ),
    ]
