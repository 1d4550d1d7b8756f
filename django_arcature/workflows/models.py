"""The tables a workflow or batch adds beside the job table.

Job rows stay where they are: a node *is* a job (same id), so the admin, ``wait()``,
cancel and requeue work on it as on any job. What is new:

- :class:`WorkflowRun`: one per enqueued workflow; ``live_key`` holds its key while
  the workflow is live (NULL never collides, so finished workflows free their key).
- :class:`WorkflowNode`: one per node, keyed by its job's id: its name in the
  workflow, its ``when``, and which upstream node cancelled it (for resume).
- :class:`WorkflowEdge`: one row per dependency. A completion reads the edges
  *leaving* its own job and writes none of them (its job's status says how they
  were decided); only the last step (counting down the dependent's open edges,
  ``WorkflowNode.open_upstreams``) takes the dependent's row lock, at the end of
  the completion's transaction.
- :class:`BatchRun` and :class:`BatchCounter`: a batch and its counters, split
  over a few shard rows so concurrent member completions rarely meet on one row;
  the counts are the sum of the shards (``BATCH_COUNTER_SHARDS`` rows, never the
  members), the total is on the batch row (written only when members are added).

No database foreign key points at the job table: pruning jobs stays a plain
``DELETE`` (Django's fast delete), and a node whose job was pruned is simply gone.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.utils.translation import gettext_lazy as _

from django_arcature.db.fields import ExactCharField

__all__ = [
    "BATCH_COUNTER_SHARDS",
    "BatchCounter",
    "BatchRun",
    "EdgeState",
    "JobProgress",
    "Outcome",
    "When",
    "WorkflowCounter",
    "WorkflowEdge",
    "WorkflowNode",
    "WorkflowRun",
]

#: Counter rows per batch: member completions pick one by their job id.
BATCH_COUNTER_SHARDS = 16


class When(models.TextChoices):
    """What a dependent needs of its upstream nodes to run."""

    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")
    ALWAYS = "always", _("always")


class Outcome(models.TextChoices):
    """How a workflow or batch ended; empty while it is in progress (the metrics read it)."""

    IN_PROGRESS = "", _("in progress")
    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")
    CANCELLED = "cancelled", _("cancelled")


class EdgeState(models.TextChoices):
    """One dependency: not decided yet, met, or never to be met."""

    OPEN = "open", _("open")
    MET = "met", _("met")
    UNMET = "unmet", _("unmet")


class WorkflowRun(models.Model):
    """An enqueued workflow (the builder is ``django_arcature.Workflow``)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(_("name"), max_length=200)
    key = ExactCharField(_("key"), max_length=255, blank=True, default="")
    #: The key while the workflow is live, NULL once it is finished or cancelled.
    live_key = ExactCharField(_("live key"), max_length=255, null=True, blank=True, unique=True)
    node_count = models.IntegerField(_("nodes"), default=0)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    cancelled_at = models.DateTimeField(_("cancelled at"), null=True, blank=True)
    #: Set in the transaction that finished its last node (or cancelled it); a requeue
    #: of a dead node that resumes the workflow clears both again.
    outcome = models.CharField(
        _("outcome"), max_length=16, choices=Outcome.choices, blank=True, default=""
    )
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)

    class Meta:
        verbose_name = _("workflow")
        verbose_name_plural = _("workflows")
        ordering = ("-created_at",)
        indexes = (models.Index(fields=["outcome", "finished_at"], name="arcature_wf_outcome_idx"),)

    def __str__(self) -> str:
        return f"{self.name} ({self.key})" if self.key else self.name


class BatchRun(models.Model):
    """An enqueued batch: callbacks by task name, fired once when the last member ends."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(_("name"), max_length=200, blank=True, default="")
    on_success = models.CharField(_("on success"), max_length=255, blank=True, default="")
    on_finish = models.CharField(_("on finish"), max_length=255, blank=True, default="")
    #: ``{"on_success": {...}, "on_finish": {...}}``: each callback's ``.using()``
    #: options (``workflows.callback_options``), applied when it is enqueued.
    callback_options = models.JSONField(
        _("callback options"), default=dict, blank=True, editable=False
    )
    #: Members added so far; written only under the batch row's lock (adding, closing).
    total = models.IntegerField(_("members"), default=0)
    #: Open: members may still be added; the callbacks wait for it to be closed.
    closed = models.BooleanField(_("closed"), default=False)
    #: Set in the transaction that enqueued the callbacks: they never fire twice.
    fired_at = models.DateTimeField(_("callbacks enqueued at"), null=True, blank=True)
    #: The callbacks' jobs, written with ``fired_at`` (null before that, for a callback
    #: the batch does not have, and for batches fired before migration 0017). Plain
    #: ids, not foreign keys: the jobs may be pruned before the batch is.
    on_success_job_id = models.UUIDField(_("on success job"), null=True, blank=True)
    on_finish_job_id = models.UUIDField(_("on finish job"), null=True, blank=True)
    cancelled_at = models.DateTimeField(_("cancelled at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    #: Written with ``fired_at`` (succeeded: no member died or was cancelled) or by a cancel.
    outcome = models.CharField(
        _("outcome"), max_length=16, choices=Outcome.choices, blank=True, default=""
    )

    class Meta:
        verbose_name = _("batch")
        verbose_name_plural = _("batches")
        ordering = ("-created_at",)
        indexes = (
            models.Index(fields=["outcome", "created_at"], name="arcature_batch_outcome_idx"),
        )

    def __str__(self) -> str:
        return self.name or str(self.id)


class BatchCounter(models.Model):
    """One shard of a batch's counters; the batch's counts are the sums over its shards."""

    batch = models.ForeignKey(BatchRun, on_delete=models.CASCADE, related_name="counters")
    shard = models.SmallIntegerField()
    succeeded = models.IntegerField(default=0)
    dead = models.IntegerField(default=0)
    cancelled = models.IntegerField(default=0)

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=["batch", "shard"], name="arcature_batch_shard"),
        )

    def __str__(self) -> str:
        return f"{self.batch_id}#{self.shard}"


class WorkflowCounter(models.Model):
    """One shard of how many of a workflow's nodes have finished (and how many died).

    Node completions add to the shard their job id picks, so siblings finishing
    together rarely meet on one row; the workflow is finished when the shards sum
    to its ``node_count`` (checked under the workflow row's lock, see
    :mod:`django_arcature.manager.dependencies`).
    """

    workflow = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="counters")
    shard = models.SmallIntegerField()
    finished = models.IntegerField(default=0)
    dead = models.IntegerField(default=0)
    #: Cancelled by an operator (not the nodes let go because of an upstream's outcome).
    cancelled = models.IntegerField(default=0)

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=["workflow", "shard"], name="arcature_workflow_shard"),
        )

    def __str__(self) -> str:
        return f"{self.workflow_id}#{self.shard}"


class WorkflowNode(models.Model):
    """A job's place in a workflow or batch; its state is its job's status."""

    job_id = models.UUIDField(primary_key=True)
    workflow = models.ForeignKey(
        WorkflowRun, on_delete=models.CASCADE, null=True, blank=True, related_name="nodes"
    )
    batch = models.ForeignKey(
        BatchRun, on_delete=models.CASCADE, null=True, blank=True, related_name="members"
    )
    name = models.CharField(_("name"), max_length=200)
    when = models.CharField(_("when"), max_length=16, choices=When.choices, default=When.SUCCEEDED)
    #: Whether any edge leaves this node: a completion of a leaf looks no further.
    has_dependents = models.BooleanField(default=False)
    #: The upstream job whose outcome cancelled this node (a requeue of it resumes this one).
    cancelled_by = models.UUIDField(null=True, blank=True)
    #: While the node waits: how many of its edges are still open (their upstream has
    #: not finished). A fan-in's completions take their met edges off it, one
    #: ``UPDATE`` per dependent and flush, under the dependent's job-row lock, instead
    #: of writing each edge (a non-HOT row version in every index of the edge table);
    #: the one that takes it to zero releases the dependent. Not kept once the node
    #: has left ``waiting``; ``dependencies.resume`` counts it again for a node that
    #: comes back.
    open_upstreams = models.IntegerField(default=0, db_default=0, editable=False)

    class Meta:
        verbose_name = _("workflow node")
        verbose_name_plural = _("workflow nodes")
        constraints = (
            models.UniqueConstraint(fields=["workflow", "name"], name="arcature_node_name"),
        )

    def __str__(self) -> str:
        return self.name


class WorkflowEdge(models.Model):
    """``downstream`` waits for ``upstream``; decided by the upstream job's outcome."""

    id = models.BigAutoField(primary_key=True)
    workflow = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="edges")
    upstream_id = models.UUIDField()
    downstream_id = models.UUIDField()
    #: The dependent's ``when``, copied so an upstream's completion decides its edges alone.
    when = models.CharField(max_length=16, choices=When.choices, default=When.SUCCEEDED)
    #: As written: a completion leaves it ``open`` (its upstream's status then says
    #: how it was decided); ``met`` or ``unmet`` where a requeue of its upstream fixed
    #: it, or a completion before migration 0020 wrote it
    #: (``dependencies.edge_states`` reads the state of every edge).
    state = models.CharField(max_length=8, choices=EdgeState.choices, default=EdgeState.OPEN)
    #: Whether this is the only edge into its dependent, as built (edges are never added
    #: to an enqueued workflow). The completion that finds a sole edge met releases the
    #: dependent without counting its open edges (it has no other). False (the safe
    #: default, the general path) for edges written before 0017.
    sole = models.BooleanField(default=False, db_default=False)

    class Meta:
        # A dependent's edges, by state: ``resume``, the cancel's reason and readers.
        # (Until 0020 a fan-in probe asked of it "is any edge of this dependent still
        # open?"; ``upstream_id`` last kept that probe from stepping over the met
        # edges' dead versions. Completions no longer write edges, so no version is
        # left behind; the index is kept as it was.)
        indexes = (
            models.Index(
                fields=["downstream_id", "state", "upstream_id"], name="arcature_edge_down_idx"
            ),
        )
        constraints = (
            models.UniqueConstraint(
                fields=["upstream_id", "downstream_id"], name="arcature_edge_once"
            ),
        )

    def __str__(self) -> str:
        # Not the stored state: a decided edge stays "open" as stored
        # (``dependencies.edge_states`` gives every edge's state).
        return f"{self.upstream_id} → {self.downstream_id} (when {self.when})"


class JobProgress(models.Model):
    """The last progress a running job reported (``current_job().progress()``), fenced."""

    job_id = models.UUIDField(primary_key=True)
    fraction = models.FloatField(_("progress"), default=0.0)
    message = models.CharField(_("message"), max_length=255, blank=True, default="")
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("job progress")
        verbose_name_plural = _("job progress")

    def __str__(self) -> str:
        return f"{self.job_id}: {self.fraction:.0%} {self.message}"
