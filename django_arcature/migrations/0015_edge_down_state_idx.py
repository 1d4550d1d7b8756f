"""The fan-in probe's index: ``arcature_edge_down_idx`` gains ``upstream_id`` as its last column.

A completion of one of a wide fan-in's upstream nodes, holding the dependent's row
lock, asks whether any of the dependent's edges is still open (an ``EXISTS`` that
stops at the first). On (downstream_id, state) the open entries were in insertion
order, which is the order the siblings are released and claimed in; the entries of
edges already met (dead row versions until vacuum, and on PostgreSQL grouped into
posting lists that cannot be marked dead one by one) came first, so every probe
stepped over all of them: quadratic over the fan-in, 16-28 ms a probe towards the
end of a 1 → 10,000 → 1 fan-in, 80-90 ms while an older snapshot held vacuum back
(the stalled benchmark rounds). With ``upstream_id`` (a random UUID) last, the open
entries are in an order unrelated to the completions, and each key is distinct:
about 1 ms a probe throughout, in either case.

The edge table only: no job row is rewritten.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_arcature", "0014_workflow_ops"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="workflowedge",
            name="arcature_edge_down_idx",
        ),
        migrations.AddIndex(
            model_name="workflowedge",
            index=models.Index(
                fields=["downstream_id", "state", "upstream_id"], name="arcature_edge_down_idx"
            ),
        ),
    ]
