"""Input limits (issue 10): the same values accepted and matched on every database.

``queue`` and ``unique_key`` get a binary, no-pad collation on MySQL/MariaDB (a
worker for "email" no longer takes "Email" jobs; "Order-1" and "order-1" are two
keys); elsewhere nothing changes in the database. The JSON columns name the
encoder that writes large floats in full (no SQL on any database).
"""

from django.db import migrations, models

import django_arcature.core.payloads
import django_arcature.db.fields


class Migration(migrations.Migration):
    dependencies = [
        ("django_arcature", "0005_postgresql_partial_indexes"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="attempt_log",
            field=models.JSONField(
                blank=True,
                default=list,
                encoder=django_arcature.core.payloads.ExactJSONEncoder,
                verbose_name="attempt log",
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="payload",
            field=models.JSONField(
                default=dict,
                encoder=django_arcature.core.payloads.ExactJSONEncoder,
                verbose_name="payload",
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="queue",
            field=django_arcature.db.fields.ExactCharField(
                default="default", max_length=100, verbose_name="queue"
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="result",
            field=models.JSONField(
                blank=True,
                encoder=django_arcature.core.payloads.ExactJSONEncoder,
                null=True,
                verbose_name="result",
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="unique_key",
            field=django_arcature.db.fields.ExactCharField(
                blank=True, max_length=255, null=True, verbose_name="unique key"
            ),
        ),
    ]
