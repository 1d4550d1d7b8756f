"""Each waiting workflow node's count of open edges (``WorkflowNode.open_upstreams``).

A fan-in's completions used to write every edge they met (one non-HOT row version
in each index of the edge table per edge) and probe the dependent's edges for one
still open; they now take their met edges off this count instead. The column is
added with a constant default (0), then counted for the nodes waiting at the time
of the upgrade: their edges still stored ``open`` whose upstream job has not
finished. Edges decided before the upgrade keep the state stored for them.
Nothing else reads the count: nodes that are not waiting keep 0.
"""

from django.db import migrations, models

LIVE = ("waiting", "pending", "running")
CHUNK = 500  # SQLite's limit on parameters, with room to spare


def count_open_edges(apps, schema_editor):  # type: ignore[no-untyped-def]
    using = schema_editor.connection.alias
    job = apps.get_model("django_arcature", "Job").objects.using(using)
    node = apps.get_model("django_arcature", "WorkflowNode").objects.using(using)
    edge = apps.get_model("django_arcature", "WorkflowEdge").objects.using(using)
    waiting = list(
        job.filter(
            status="waiting", id__in=node.filter(workflow_id__isnull=False).values("job_id")
        ).values_list("id", flat=True)
    )
    for start in range(0, len(waiting), CHUNK):
        part = waiting[start : start + CHUNK]
        incoming = list(
            edge.filter(downstream_id__in=part, state="open").values_list(
                "downstream_id", "upstream_id"
            )
        )
        ups = sorted({up for _, up in incoming})
        live: set[object] = set()
        for at in range(0, len(ups), CHUNK):
            live.update(
                job.filter(id__in=ups[at : at + CHUNK], status__in=LIVE).values_list(
                    "id", flat=True
                )
            )
        counts: dict[object, int] = {}
        for down, up in incoming:
            if up in live:
                counts[down] = counts.get(down, 0) + 1
        by_count: dict[int, list[object]] = {}
        for down, count in counts.items():
            by_count.setdefault(count, []).append(down)
        for count, downs in by_count.items():
            node.filter(job_id__in=downs).update(open_upstreams=count)


class Migration(migrations.Migration):
    dependencies = [("django_arcature", "0019_batch_callback_options")]

    operations = [
        migrations.AddField(
            model_name="workflownode",
            name="open_upstreams",
            field=models.IntegerField(db_default=0, default=0, editable=False),
        ),
        migrations.RunPython(count_open_edges, migrations.RunPython.noop, elidable=True),
    ]
