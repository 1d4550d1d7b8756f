"""Enqueueing and cancelling workflows and batches: their job rows, nodes and edges.

The builders (``django_arcature.Workflow`` and ``Batch``) validate the shape and
call these; every job row they add or change is written here, in the caller's
transaction (or one of its own).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from django.db import IntegrityError, transaction

from django_arcature import signals
from django_arcature.db import DatabaseNow, driver_for
from django_arcature.db import retry_on_lock_conflict as _retry_on_lock_conflict
from django_arcature.states import JobStatus

from .base import JobWriter
from .dependencies import (
    CANCELLED,
    count_members,
    fire_finished_batches,
    shard_of,
    workflow_shards,
)
from .enqueue import EnqueueWrites

if TYPE_CHECKING:
    from django_arcature.models import Job
    from django_arcature.workflows.models import BatchRun, WorkflowRun

    from .operations import OperatorWrites

logger = logging.getLogger(__name__)

#: How many dead nodes one transaction of a resume requeues (``resume_workflow(chunk_size=)``).
RESUME_CHUNK = 500

#: What a cancel of a workflow or a batch stops.
_STOPPABLE = (JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING)


@dataclass
class NodeRow:
    """One node to insert: its job and where it sits."""

    job_id: uuid.UUID
    task: Any
    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    options: Mapping[str, Any] = field(default_factory=dict)
    after: list[uuid.UUID] = field(default_factory=list)
    when: str = "succeeded"
    has_dependents: bool = False


def insert_graph_rows(
    using: str, model: Any, rows: Sequence[SimpleNamespace], *, varying: Collection[str]
) -> None:
    """Insert node or edge rows given as plain attribute bags, every column named.

    Through the driver's bulk path (``COPY`` on PostgreSQL, multi-row ``INSERT`` on
    MariaDB), as the nodes' job rows go, instead of ``bulk_create``: for a
    10,000-node workflow the ORM's model instances and per-parameter compilation
    were most of ``Workflow.enqueue()``'s time. Each bag holds every concrete
    column's ``attname`` but an auto primary key's (the database assigns it); the
    columns outside ``varying`` are taken from the first row, once.
    """
    if rows:
        driver_for(using).insert_rows(model, rows, varying, 1000)


def _node_bag(
    job_id: uuid.UUID,
    name: str,
    *,
    workflow_id: uuid.UUID | None = None,
    batch_id: uuid.UUID | None = None,
    when: str = "succeeded",
    has_dependents: bool = False,
    open_upstreams: int = 0,
) -> SimpleNamespace:
    """A ``WorkflowNode`` row for :func:`insert_graph_rows`, defaults as the model's."""
    return SimpleNamespace(
        job_id=job_id,
        workflow_id=workflow_id,
        batch_id=batch_id,
        name=name,
        when=when,
        has_dependents=has_dependents,
        cancelled_by=None,
        open_upstreams=open_upstreams,
    )


def _models() -> Any:
    from django_arcature.workflows import models

    return models


class WorkflowWrites(JobWriter):
    """Workflows and batches in, and out again when an operator cancels them."""

    def enqueue_workflow(
        self, name: str, key: str | None, nodes: Sequence[NodeRow]
    ) -> tuple[WorkflowRun, bool]:
        """Insert a workflow's rows in one transaction: (the workflow, whether it is new).

        Nodes without dependencies start ``pending``, the others ``waiting``. With
        a ``key`` held by a live workflow, nothing is inserted and that one is
        returned; a workflow whose nodes have all finished gives its key up here.
        """
        m = _models()
        using = self.db

        def operation() -> tuple[WorkflowRun, bool]:
            with transaction.atomic(using=using):
                run = m.WorkflowRun(name=name, key=key or "", live_key=key, node_count=len(nodes))
                if key is not None:
                    holder = self._live_holder(key)
                    if holder is not None:
                        return holder, False
                    try:
                        with transaction.atomic(using=using):
                            run.save(using=using, force_insert=True)
                    except IntegrityError:
                        holder = self._live_holder(key)
                        if holder is None:
                            raise
                        return holder, False
                else:
                    run.save(using=using, force_insert=True)
                m.WorkflowCounter.objects.using(using).bulk_create(
                    [
                        m.WorkflowCounter(workflow_id=run.id, shard=shard)
                        for shard in range(workflow_shards(len(nodes)))
                    ]
                )
                jobs = self._insert_node_jobs(nodes)
                insert_graph_rows(
                    using,
                    m.WorkflowNode,
                    [
                        _node_bag(
                            node.job_id,
                            node.name,
                            workflow_id=run.id,
                            when=node.when,
                            has_dependents=node.has_dependents,
                            open_upstreams=len(node.after),
                        )
                        for node in nodes
                    ],
                    varying=("job_id", "name", "when", "has_dependents", "open_upstreams"),
                )
                open_state = m.EdgeState.OPEN
                insert_graph_rows(
                    using,
                    m.WorkflowEdge,
                    [
                        SimpleNamespace(
                            workflow_id=run.id,
                            upstream_id=up,
                            downstream_id=node.job_id,
                            when=node.when,
                            state=open_state,
                            sole=len(node.after) == 1,
                        )
                        for node in nodes
                        for up in node.after
                    ],
                    varying=("upstream_id", "downstream_id", "when", "sole"),
                )
                self._enqueuer()._announce_enqueued(
                    [job for job in jobs if job.status == JobStatus.PENDING]
                )
                return run, True

        return _retry_on_lock_conflict(using, operation)

    def _enqueuer(self) -> EnqueueWrites:
        """This manager as the enqueue part it is combined with in ``JobManager``."""
        return cast("EnqueueWrites", self)

    def _live_holder(self, key: str) -> WorkflowRun | None:
        """The live workflow holding ``key``; one whose nodes all finished lets it go."""
        m = _models()
        holder = (
            m.WorkflowRun.objects.using(self.db).select_for_update().filter(live_key=key).first()
        )
        if holder is None:
            return None
        live = (
            self.using(self.db)
            .filter(
                id__in=m.WorkflowNode.objects.using(self.db)
                .filter(workflow_id=holder.id)
                .values("job_id"),
                status__in=_STOPPABLE,
            )
            .exists()
        )
        if live:
            return holder  # type: ignore[no-any-return]
        m.WorkflowRun.objects.using(self.db).filter(id=holder.id).update(live_key=None)
        return None

    def _insert_node_jobs(self, nodes: Sequence[NodeRow]) -> list[Job]:
        """The nodes' job rows, validated as any enqueue is, grouped by task and options."""
        groups: dict[tuple[Any, ...], list[NodeRow]] = {}
        for node in nodes:
            groups.setdefault((node.task, tuple(sorted(node.options.items()))), []).append(node)
        inserted: list[Job] = []
        for (task, options), members in groups.items():
            chosen = dict(options)
            rows, varying, _ = self._enqueuer()._build_rows(
                task,
                [(node.args, node.kwargs) for node in members],
                queue=chosen.get("queue"),
                priority=chosen.get("priority"),
                delay=chosen.get("delay"),
                run_at=chosen.get("run_at"),
                max_attempts=chosen.get("max_attempts"),
                unique_key=None,
                backend="",
            )
            for row, node in zip(rows, members, strict=True):
                row.id = node.job_id
                # A node is deduplicated by its workflow's key, not its own: a waiting
                # row may hold no unique key (arcature_unique_key_only_active).
                row.unique_key = None
                row.status = JobStatus.PENDING if not node.after else JobStatus.WAITING
                row.trace_context = _traced_node(row.trace_context, node)
            driver_for(self.db).insert_rows(
                self.model,
                rows,
                {*varying, "id", "status", "payload", "unique_key", "trace_context"},
                1000,
            )
            for row in rows:
                row._state.adding = False
                row._state.db = self.db
            inserted.extend(rows)
        return inserted

    def cancel_workflow(self, workflow_id: uuid.UUID, *, reason: str = "") -> int:
        """Cancel every waiting, pending and running node; running ones are fenced out.

        A running node's worker sees the claim lost at its next heartbeat
        (``current_job().cancel_requested``). Returns how many jobs were cancelled.
        ``reason`` (an operator's words) is added to each cancelled node's error;
        a second cancel keeps the first one's time.
        """
        m = _models()

        def operation() -> int:
            with transaction.atomic(using=self.db):
                node_ids = (
                    m.WorkflowNode.objects.using(self.db)
                    .filter(workflow_id=workflow_id)
                    .values("job_id")
                )
                rows = len(self._cancel_where(reason, id__in=node_ids))
                run = m.WorkflowRun.objects.using(self.db).filter(id=workflow_id)
                run.update(live_key=None)
                run.filter(cancelled_at__isnull=True).update(cancelled_at=DatabaseNow())
                run.filter(outcome="").update(
                    outcome=m.Outcome.CANCELLED, finished_at=DatabaseNow()
                )
                return rows

        return _retry_on_lock_conflict(self.db, operation)

    def _cancel_where(self, reason: str = "", **where: Any) -> list[uuid.UUID]:
        """Cancel the stoppable jobs ``where`` selects: the ids actually cancelled.

        They are locked first, so the ids returned are exactly the rows changed: a
        completion that landed meanwhile is not among them (and is counted once, by it).
        """
        from django_arcature.queues.occupancy import CancelledClaim, hold_cancelled

        locked = list(
            self.using(self.db)
            .filter(status__in=_STOPPABLE, **where)
            .order_by("id")
            .select_for_update()
            .values_list("id", "status", "claim_token", "queue", "locked_by", "lease_expires_at")
        )
        if not locked:
            return []
        ids = [row[0] for row in locked]
        rows = (
            self.using(self.db)
            .filter(id__in=ids, status__in=_STOPPABLE)
            .update(
                status=JobStatus.CANCELLED,
                claim_token=None,
                unique_key=None,
                lease_expires_at=None,
                finished_at=DatabaseNow(),
                last_error=cancel_message(reason),
            )
        )
        # A cancelled running node in a limited queue keeps its slot, as for
        # Job.objects.cancel: its handler may run on after the cancel.
        hold_cancelled(
            self.db,
            (
                CancelledClaim(job_id, token, queue, worker, expires)
                for job_id, status, token, queue, worker, expires in locked
                if status == JobStatus.RUNNING
            ),
        )
        model = self.model
        transaction.on_commit(
            lambda: [signals.job_cancelled.send(sender=model, job_id=job_id) for job_id in ids],
            using=self.db,
        )
        if rows != len(ids):  # the ids are locked: only a broken lock gets here
            logger.warning("cancel: %d of %d locked jobs changed", rows, len(ids))
        return ids

    # --- batches --------------------------------------------------------------------

    def enqueue_batch(
        self,
        batch_id: uuid.UUID | None,
        members: Sequence[NodeRow],
        *,
        name: str = "",
        on_success: str = "",
        on_finish: str = "",
        callback_options: Mapping[str, Mapping[str, Any]] | None = None,
        close: bool,
        limit: int,
    ) -> BatchRun:
        """Create a batch (``batch_id`` None) or add to an open one, in one transaction."""
        m = _models()
        using = self.db

        def operation() -> BatchRun:
            with transaction.atomic(using=using):
                if batch_id is None:
                    batch = m.BatchRun.objects.using(using).create(
                        name=name,
                        on_success=on_success,
                        on_finish=on_finish,
                        callback_options=dict(callback_options or {}),
                    )
                    m.BatchCounter.objects.using(using).bulk_create(
                        [
                            m.BatchCounter(batch=batch, shard=shard)
                            for shard in range(m.BATCH_COUNTER_SHARDS)
                        ]
                    )
                else:
                    batch = (
                        m.BatchRun.objects.using(using).select_for_update().filter(id=batch_id)
                    ).first()
                    if batch is None:
                        raise LookupError(f"no batch {batch_id}")
                    if batch.closed or batch.cancelled_at is not None:
                        raise ValueError(
                            f"batch {batch_id} is closed: members can be added only "
                            "to a batch enqueued with close=False and not closed since"
                        )
                if batch.total + len(members) > limit:
                    raise ValueError(
                        f"a batch holds at most {limit} members "
                        f"(ARCATURE['BATCH_MAX_MEMBERS']); this one would hold "
                        f"{batch.total + len(members)}"
                    )
                jobs = self._insert_node_jobs(members)
                insert_graph_rows(
                    using,
                    m.WorkflowNode,
                    [_node_bag(node.job_id, node.name, batch_id=batch.id) for node in members],
                    varying=("job_id", "name"),
                )
                batch.total += len(members)
                batch.closed = close
                m.BatchRun.objects.using(using).filter(id=batch.id).update(
                    total=batch.total, closed=close
                )
                if close:
                    fire_finished_batches(using, self.model, [batch.id])
                self._enqueuer()._announce_enqueued(jobs)
                return batch  # type: ignore[no-any-return]

        return _retry_on_lock_conflict(using, operation)

    def close_batch(self, batch_id: uuid.UUID) -> None:
        """No more members: the callbacks fire once the last one finishes (now if it has)."""
        m = _models()

        def operation() -> None:
            with transaction.atomic(using=self.db):
                m.BatchRun.objects.using(self.db).filter(id=batch_id).update(closed=True)
                fire_finished_batches(self.db, self.model, [batch_id])

        _retry_on_lock_conflict(self.db, operation)

    def cancel_batch(self, batch_id: uuid.UUID, *, reason: str = "") -> int:
        """Cancel the batch's unfinished members; a cancelled batch enqueues no callback.

        ``reason`` as for :meth:`cancel_workflow`; a second cancel keeps the first's time.
        """
        m = _models()

        def operation() -> int:
            with transaction.atomic(using=self.db):
                m.BatchRun.objects.using(self.db).filter(id=batch_id).select_for_update().exists()
                member_ids = (
                    m.WorkflowNode.objects.using(self.db).filter(batch_id=batch_id).values("job_id")
                )
                batch = m.BatchRun.objects.using(self.db).filter(id=batch_id)
                batch.update(closed=True)
                batch.filter(cancelled_at__isnull=True).update(cancelled_at=DatabaseNow())
                batch.filter(fired_at__isnull=True).update(outcome=m.Outcome.CANCELLED)
                # Only the members this transaction cancelled are counted as cancelled: a
                # member whose completion landed between a read and the lock counted itself.
                cancelled = self._cancel_where(reason, id__in=member_ids)
                count_members(self.db, self.model, dict.fromkeys(cancelled, (batch_id, CANCELLED)))
                return len(cancelled)

        return _retry_on_lock_conflict(self.db, operation)

    # --- resuming -------------------------------------------------------------------

    def resume_workflow(self, workflow_id: uuid.UUID, *, chunk_size: int = RESUME_CHUNK) -> Resumed:
        """Requeue every dead node of a workflow; their cancelled descendants come back
        ``waiting`` (see ``requeue_dead``).

        The dead nodes are requeued ``chunk_size`` at a time, one transaction each
        (see :meth:`_resume`), so a resume of very many holds no lock and no
        transaction for long. Each transaction locks the workflow's row first, so
        two resumes (a double click) queue up chunk by chunk and requeue each node
        once between them, and a cancel in flight is waited for: a cancelled
        workflow is not resumed further (``Resumed.cancelled``), as ``requeue_dead``
        keeps its nodes cancelled too.
        """
        m = _models()
        return self._resume(
            m.WorkflowRun,
            workflow_id,
            m.WorkflowNode.objects.filter(workflow_id=workflow_id),
            chunk_size,
        )

    def resume_batch(self, batch_id: uuid.UUID, *, chunk_size: int = RESUME_CHUNK) -> Resumed:
        """Requeue every dead member of a batch, in chunks (as ``resume_workflow``).

        Each requeued member is taken off its shard's dead count. A batch whose
        callbacks have fired does not fire them again; a cancelled one is not resumed.
        """
        m = _models()
        return self._resume(
            m.BatchRun, batch_id, m.WorkflowNode.objects.filter(batch_id=batch_id), chunk_size
        )

    def _resume(self, run_model: Any, run_id: uuid.UUID, members: Any, chunk_size: int) -> Resumed:
        """Requeue the dead ``members`` in id order, ``chunk_size`` per transaction.

        What a chunk commits is whole: each node's requeue, the descendants it
        brings back and the counters it takes them off are written together, as
        one ``requeue_dead`` writes them. A crash between chunks therefore leaves a
        consistent workflow, partly resumed: the requeued nodes live again, the
        others still dead with their descendants still cancelled, and a second
        resume requeues those. The chunks walk the ids forwards from where the last
        one stopped, so a node requeued by an earlier chunk that has died again
        meanwhile is not requeued twice by one resume. Called inside a transaction,
        every chunk is a savepoint of it, and the whole resume commits with it.
        """
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size is a number of nodes, at least 1, not {chunk_size!r}")
        total = Resumed()
        after: uuid.UUID | None = None
        while True:
            chunk, after = self._resume_chunk(run_model, run_id, members, chunk_size, after)
            total = Resumed(
                requeued=total.requeued + chunk.requeued,
                refused=total.refused + chunk.refused,
                cancelled=chunk.cancelled,
                missing=chunk.missing,
            )
            if after is None:
                return total

    def _resume_chunk(
        self,
        run_model: Any,
        run_id: uuid.UUID,
        members: Any,
        chunk_size: int,
        after: uuid.UUID | None,
    ) -> tuple[Resumed, uuid.UUID | None]:
        """One transaction of a resume: the next ``chunk_size`` dead nodes after ``after``.

        Returns what it did and the id to continue after (None: nothing is left).
        """
        requeued: list[uuid.UUID] = []

        def operation() -> tuple[Resumed, uuid.UUID | None]:
            requeued.clear()
            with transaction.atomic(using=self.db):
                run = (
                    run_model.objects.using(self.db)
                    .select_for_update()
                    .filter(id=run_id)
                    .values_list("cancelled_at", flat=True)
                )
                found = list(run)
                if not found:
                    return Resumed(missing=True), None
                if found[0] is not None:
                    return Resumed(cancelled=True), None
                dead_nodes = self.using(self.db).filter(
                    id__in=members.using(self.db).values("job_id"), status=JobStatus.DEAD
                )
                if after is not None:
                    dead_nodes = dead_nodes.filter(id__gt=after)
                dead = list(dead_nodes.order_by("id").values_list("id", flat=True)[:chunk_size])
                writer = cast("OperatorWrites", self)
                refused = 0
                for job_id in dead:
                    if writer._requeue_dead_here(job_id):
                        requeued.append(job_id)
                    elif self.using(self.db).filter(id=job_id, status=JobStatus.DEAD).exists():
                        refused += 1  # still dead: a live job holds its unique key
                more = dead[-1] if len(dead) == chunk_size else None
                return Resumed(requeued=len(requeued), refused=refused), more

        result = _retry_on_lock_conflict(self.db, operation)
        model = self.model
        ids = list(requeued)
        if ids:
            transaction.on_commit(
                lambda: [signals.job_requeued.send(sender=model, job_id=job_id) for job_id in ids],
                using=self.db,
            )
        return result

    # --- progress -------------------------------------------------------------------

    def set_progress(
        self, job_id: uuid.UUID, claim_token: uuid.UUID, fraction: float, message: str
    ) -> bool:
        """Store a running job's progress, only under its claim; False if the claim is lost."""
        m = _models()

        def operation() -> bool:
            with transaction.atomic(using=self.db):
                held = self._fenced(job_id, claim_token).select_for_update().exists()
                if not held:
                    return False
                updated = (
                    m.JobProgress.objects.using(self.db)
                    .filter(job_id=job_id)
                    .update(fraction=fraction, message=message, updated_at=DatabaseNow())
                )
                if not updated:
                    m.JobProgress.objects.using(self.db).create(
                        job_id=job_id, fraction=fraction, message=message
                    )
                return True

        return _retry_on_lock_conflict(self.db, operation)


@dataclass(frozen=True)
class Resumed:
    """What a resume did: dead nodes requeued, and those refused (their unique key is
    held by a live job); or nothing, because the run is cancelled or gone."""

    requeued: int = 0
    refused: int = 0
    cancelled: bool = False
    missing: bool = False


#: The most of an operator's reason kept in a cancelled node's error.
REASON_LIMIT = 1000


def cancel_message(reason: str) -> str:
    """The error a node cancelled with its workflow or batch keeps, with the operator's reason."""
    text = "cancelled with its workflow or batch"
    reason = " ".join(str(reason).split())[:REASON_LIMIT]
    return f"{text}: {reason}" if reason else text


#: The key, in a traced node's ``trace_context``, saying where it sits: "u" it has
#: upstream nodes (its attempt's span links to theirs), "d" it has dependents (its
#: attempt stores its span's context for them). See ``django_arcature.contrib.otel``.
NODE_TRACE_KEY = "arcature-node"


def _traced_node(carrier: Any, node: NodeRow) -> Any:
    """The enqueue's trace context, marked for span links; untouched when not traced."""
    if not isinstance(carrier, dict) or not carrier:
        return carrier
    flags = ("u" if node.after else "") + ("d" if node.has_dependents else "")
    return {**carrier, NODE_TRACE_KEY: flags} if flags else carrier


def shard_for(job_id: uuid.UUID) -> int:
    return shard_of(job_id)
