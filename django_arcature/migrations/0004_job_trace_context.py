"""Job.trace_context: the enqueuing span's trace context, for tracing across processes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_arcature", "0003_deadjob_created_idx"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="trace_context",
            field=models.JSONField(
                blank=True, default=dict, editable=False, verbose_name="trace context"
            ),
        ),
    ]
