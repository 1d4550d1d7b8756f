"""What the operators' tools read without scanning nodes: outcomes and finished counts.

``WorkflowRun.outcome``/``finished_at`` and ``BatchRun.outcome`` (empty while in
progress, indexed: the metrics count each outcome through the index) and
``WorkflowCounter``, the shard rows node completions add to (as a batch's
``BatchCounter``). Workflows and batches enqueued under 0012 are backfilled from
their job rows once, here: this is the only scan of nodes, and it runs at migrate.
"""

import zlib

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import Q, Sum

SHARDS = 16
FINISHED = ("succeeded", "dead", "cancelled")


def backfill(apps, schema_editor):  # type: ignore[no-untyped-def]
    using = schema_editor.connection.alias
    Job = apps.get_model("django_arcature", "Job")
    WorkflowRun = apps.get_model("django_arcature", "WorkflowRun")
    WorkflowNode = apps.get_model("django_arcature", "WorkflowNode")
    WorkflowCounter = apps.get_model("django_arcature", "WorkflowCounter")
    BatchRun = apps.get_model("django_arcature", "BatchRun")
    BatchCounter = apps.get_model("django_arcature", "BatchCounter")
    for run in WorkflowRun.objects.using(using).iterator():
        shards = max(1, min(SHARDS, run.node_count))
        finished, dead, cancelled = [0] * shards, [0] * shards, [0] * shards
        nodes = WorkflowNode.objects.using(using).filter(workflow_id=run.id)
        let_go = set(nodes.filter(cancelled_by__isnull=False).values_list("job_id", flat=True))
        for job_id, status in (
            Job.objects.using(using)
            .filter(id__in=nodes.values("job_id"))
            .values_list("id", "status")
            .iterator()
        ):
            if status in FINISHED:
                shard = zlib.crc32(job_id.bytes) % shards
                finished[shard] += 1
                dead[shard] += status == "dead"
                cancelled[shard] += status == "cancelled" and job_id not in let_go
        WorkflowCounter.objects.using(using).bulk_create(
            WorkflowCounter(
                workflow_id=run.id,
                shard=n,
                finished=finished[n],
                dead=dead[n],
                cancelled=cancelled[n],
            )
            for n in range(shards)
        )
        if run.cancelled_at is not None:
            run.outcome, run.finished_at = "cancelled", run.cancelled_at
        elif sum(finished) >= run.node_count:
            run.outcome = "failed" if sum(dead) else "cancelled" if sum(cancelled) else "succeeded"
            run.finished_at = run.created_at
        run.save(using=using, update_fields=["outcome", "finished_at"])
    for batch in BatchRun.objects.using(using).filter(
        Q(fired_at__isnull=False) | Q(cancelled_at__isnull=False)
    ):
        if batch.cancelled_at is not None:
            batch.outcome = "cancelled"
        else:
            sums = BatchCounter.objects.using(using).filter(batch_id=batch.id)
            bad = sums.aggregate(n=Sum("dead") + Sum("cancelled"))["n"]
            batch.outcome = "failed" if bad else "succeeded"
        batch.save(using=using, update_fields=["outcome"])


class Migration(migrations.Migration):
    dependencies = [("django_arcature", "0013_postgresql_finish_notify")]

    operations = [
        migrations.CreateModel(
            name="WorkflowCounter",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("shard", models.SmallIntegerField()),
                ("finished", models.IntegerField(default=0)),
                ("dead", models.IntegerField(default=0)),
                ("cancelled", models.IntegerField(default=0)),
            ],
        ),
        migrations.AddField(
            model_name="batchrun",
            name="outcome",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "in progress"),
                    ("succeeded", "succeeded"),
                    ("failed", "failed"),
                    ("cancelled", "cancelled"),
                ],
                default="",
                max_length=16,
                verbose_name="outcome",
            ),
        ),
        migrations.AddField(
            model_name="workflowrun",
            name="finished_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="finished at"),
        ),
        migrations.AddField(
            model_name="workflowrun",
            name="outcome",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "in progress"),
                    ("succeeded", "succeeded"),
                    ("failed", "failed"),
                    ("cancelled", "cancelled"),
                ],
                default="",
                max_length=16,
                verbose_name="outcome",
            ),
        ),
        migrations.AddIndex(
            model_name="batchrun",
            index=models.Index(fields=["outcome", "created_at"], name="arcature_batch_outcome_idx"),
        ),
        migrations.AddIndex(
            model_name="workflowrun",
            index=models.Index(fields=["outcome", "finished_at"], name="arcature_wf_outcome_idx"),
        ),
        migrations.AddField(
            model_name="workflowcounter",
            name="workflow",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="counters",
                to="django_arcature.workflowrun",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflowcounter",
            constraint=models.UniqueConstraint(
                fields=("workflow", "shard"), name="arcature_workflow_shard"
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
    ]
