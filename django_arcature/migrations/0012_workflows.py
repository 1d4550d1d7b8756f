"""Workflows and batches: a ``waiting`` job status and the tables beside the job table.

``waiting`` joins the statuses the check constraint allows. The claim reads
``status = 'pending'`` only: on PostgreSQL its indexes are partial on that (0005),
so waiting rows are not in them at all; on MariaDB and SQLite the claim indexes
lead with ``status``, so waiting rows sit in a key range the claim's range scan
never enters. Nodes, edges, batches, their counter shards and job progress get
tables of their own, with no database foreign key to the job table (pruning jobs
stays a fast delete).

On PostgreSQL re-adding the status check reads the job table once under a lock;
on SQLite the job table is rebuilt (as any constraint change there does).
"""

import uuid

import django.db.models.deletion
from django.db import migrations, models

import django_arcature.db.fields


class Migration(migrations.Migration):
    dependencies = [
        ("django_arcature", "0011_limits_occupancy"),
    ]

    operations = [
        migrations.CreateModel(
            name="BatchCounter",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("shard", models.SmallIntegerField()),
                ("succeeded", models.IntegerField(default=0)),
                ("dead", models.IntegerField(default=0)),
                ("cancelled", models.IntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name="BatchRun",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                (
                    "name",
                    models.CharField(blank=True, default="", max_length=200, verbose_name="name"),
                ),
                (
                    "on_success",
                    models.CharField(
                        blank=True, default="", max_length=255, verbose_name="on success"
                    ),
                ),
                (
                    "on_finish",
                    models.CharField(
                        blank=True, default="", max_length=255, verbose_name="on finish"
                    ),
                ),
                ("total", models.IntegerField(default=0, verbose_name="members")),
                ("closed", models.BooleanField(default=False, verbose_name="closed")),
                (
                    "fired_at",
                    models.DateTimeField(
                        blank=True, null=True, verbose_name="callbacks enqueued at"
                    ),
                ),
                (
                    "cancelled_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="cancelled at"),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True, verbose_name="created at")),
            ],
            options={
                "verbose_name": "batch",
                "verbose_name_plural": "batches",
                "ordering": ("-created_at",),
            },
        ),
        migrations.CreateModel(
            name="JobProgress",
            fields=[
                ("job_id", models.UUIDField(primary_key=True, serialize=False)),
                ("fraction", models.FloatField(default=0.0, verbose_name="progress")),
                (
                    "message",
                    models.CharField(
                        blank=True, default="", max_length=255, verbose_name="message"
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True, verbose_name="updated at")),
            ],
            options={
                "verbose_name": "job progress",
                "verbose_name_plural": "job progress",
            },
        ),
        migrations.CreateModel(
            name="WorkflowEdge",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("upstream_id", models.UUIDField()),
                ("downstream_id", models.UUIDField()),
                (
                    "when",
                    models.CharField(
                        choices=[
                            ("succeeded", "succeeded"),
                            ("failed", "failed"),
                            ("always", "always"),
                        ],
                        default="succeeded",
                        max_length=16,
                    ),
                ),
                (
                    "state",
                    models.CharField(
                        choices=[("open", "open"), ("met", "met"), ("unmet", "unmet")],
                        default="open",
                        max_length=8,
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="WorkflowNode",
            fields=[
                ("job_id", models.UUIDField(primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=200, verbose_name="name")),
                (
                    "when",
                    models.CharField(
                        choices=[
                            ("succeeded", "succeeded"),
                            ("failed", "failed"),
                            ("always", "always"),
                        ],
                        default="succeeded",
                        max_length=16,
                        verbose_name="when",
                    ),
                ),
                ("has_dependents", models.BooleanField(default=False)),
                ("cancelled_by", models.UUIDField(blank=True, null=True)),
            ],
            options={
                "verbose_name": "workflow node",
                "verbose_name_plural": "workflow nodes",
            },
        ),
        migrations.CreateModel(
            name="WorkflowRun",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("name", models.CharField(max_length=200, verbose_name="name")),
                (
                    "key",
                    django_arcature.db.fields.ExactCharField(
                        blank=True, default="", max_length=255, verbose_name="key"
                    ),
                ),
                (
                    "live_key",
                    django_arcature.db.fields.ExactCharField(
                        blank=True, max_length=255, null=True, unique=True, verbose_name="live key"
                    ),
                ),
                ("node_count", models.IntegerField(default=0, verbose_name="nodes")),
                ("created_at", models.DateTimeField(auto_now_add=True, verbose_name="created at")),
                (
                    "cancelled_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="cancelled at"),
                ),
            ],
            options={
                "verbose_name": "workflow",
                "verbose_name_plural": "workflows",
                "ordering": ("-created_at",),
            },
        ),
        migrations.RemoveConstraint(
            model_name="job",
            name="arcature_status_known",
        ),
        migrations.AlterField(
            model_name="job",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "pending"),
                    ("running", "running"),
                    ("succeeded", "succeeded"),
                    ("dead", "dead"),
                    ("cancelled", "cancelled"),
                    ("waiting", "waiting"),
                ],
                default="pending",
                max_length=16,
                verbose_name="status",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        ["pending", "running", "succeeded", "dead", "cancelled", "waiting"],
                    )
                ),
                name="arcature_status_known",
            ),
        ),
        migrations.AddField(
            model_name="batchcounter",
            name="batch",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="counters",
                to="django_arcature.batchrun",
            ),
        ),
        migrations.AddField(
            model_name="workflownode",
            name="batch",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="members",
                to="django_arcature.batchrun",
            ),
        ),
        migrations.AddField(
            model_name="workflownode",
            name="workflow",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="nodes",
                to="django_arcature.workflowrun",
            ),
        ),
        migrations.AddField(
            model_name="workflowedge",
            name="workflow",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="edges",
                to="django_arcature.workflowrun",
            ),
        ),
        migrations.AddConstraint(
            model_name="batchcounter",
            constraint=models.UniqueConstraint(
                fields=("batch", "shard"), name="arcature_batch_shard"
            ),
        ),
        migrations.AddConstraint(
            model_name="workflownode",
            constraint=models.UniqueConstraint(
                fields=("workflow", "name"), name="arcature_node_name"
            ),
        ),
        migrations.AddIndex(
            model_name="workflowedge",
            index=models.Index(fields=["downstream_id", "state"], name="arcature_edge_down_idx"),
        ),
        migrations.AddConstraint(
            model_name="workflowedge",
            constraint=models.UniqueConstraint(
                fields=("upstream_id", "downstream_id"), name="arcature_edge_once"
            ),
        ),
    ]
