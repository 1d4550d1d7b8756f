"""Deleting finished jobs in small batches that concurrent pruners never share.

Each batch is one short transaction that reaches its rows through the
``(status, finished_at)`` index, so a tick reads only rows it may delete:

- PostgreSQL: ``DELETE … USING (SELECT id … LIMIT n FOR UPDATE SKIP LOCKED)``.
  The picking SELECT is a MATERIALIZED CTE, run once; rows another pruner (or
  an admin action) holds are skipped, so two workers never wait on, or delete,
  the same rows.
- MySQL/MariaDB: ``SELECT id … FOR UPDATE SKIP LOCKED LIMIT n``, then ``DELETE …
  WHERE id IN (…)`` in the same transaction (MySQL cannot DELETE with a LIMITed
  subquery of the same table).
- SQLite: one ``DELETE … WHERE id IN (SELECT … LIMIT n)``; SQLite has one writer
  at a time, so concurrent pruners simply take turns.

Every statement repeats ``status IN (finished)``: a job that is pending or
running is never deleted, whatever rule or option asked for it.

**Workflows and batches.** A finished node of a workflow still in progress is
kept (``NOT EXISTS`` a live workflow holding it, one primary-key probe per
candidate row): its dependents still read its result (``upstream()``) and a
requeue may walk back through it. In the transaction that deletes a batch of
jobs, their node rows and the edges touching them go too, and a finished
workflow or batch left without nodes loses its row and its counter shards. The
counters are never decremented here: a pruned node stays counted as finished,
so a workflow that a requeue resumes after part of it was pruned still finishes
(see :func:`django_arcature.manager.dependencies.resume`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction
from django.db.models import Exists, OuterRef

from django_arcature.db import DatabaseNow, now_sql, retry_on_lock_conflict

from .rules import FINISHED, PruneRule

if TYPE_CHECKING:
    from django_arcature.models import Job

logger = logging.getLogger(__name__)

__all__ = ["PruneResult", "count_prunable", "prune", "prune_batch"]


@dataclass(frozen=True)
class PruneResult:
    rule: PruneRule
    deleted: int
    batches: int


def _job_model() -> type[Job]:
    """The job model, through the app registry: ``Job.objects.prune()`` (the manager,
    which the model module imports) deletes through this module, so importing the
    model here would tie the two into a cycle."""
    from django.apps import apps

    model: type[Job] = apps.get_model("django_arcature", "Job")
    return model


def _check(rule: PruneRule) -> None:
    if rule.status not in FINISHED:
        raise ValueError(f"retention deletes finished jobs only, not {rule.status!r}")


def _queryset(rule: PruneRule, using: str) -> Any:
    Job = _job_model()
    from django_arcature.workflows.models import WorkflowNode

    live_node = WorkflowNode.objects.using(using).filter(
        job_id=OuterRef("id"), workflow__outcome=""
    )
    rows = Job.objects.using(using).filter(
        ~Exists(live_node),
        status=rule.status,
        finished_at__lt=DatabaseNow(-rule.older_than.total_seconds()),
    )
    if rule.queues is not None:
        rows = rows.filter(queue__in=rule.queues)
    elif rule.except_queues:
        rows = rows.exclude(queue__in=rule.except_queues)
    return rows


def count_prunable(rule: PruneRule, using: str) -> int:
    """How many rows ``rule`` would delete now (``--dry-run``)."""
    _check(rule)
    return int(_queryset(rule, using).count())


def _where(rule: PruneRule, qn: Any, vendor: str) -> tuple[str, list[Any]]:
    Job = _job_model()
    from django_arcature.workflows.models import WorkflowNode, WorkflowRun

    cutoff = now_sql(vendor, -rule.older_than.total_seconds())
    sql = f"{qn('status')} = %s AND {qn('finished_at')} < {cutoff}"
    params: list[Any] = [rule.status]
    nodes, runs = qn(WorkflowNode._meta.db_table), qn(WorkflowRun._meta.db_table)
    sql += (
        f" AND NOT EXISTS (SELECT 1 FROM {nodes} n INNER JOIN {runs} w"
        f" ON w.{qn('id')} = n.{qn('workflow_id')}"
        f" WHERE n.{qn('job_id')} = {qn(Job._meta.db_table)}.{qn('id')}"
        f" AND w.{qn('outcome')} = %s)"
    )
    params.append("")
    if rule.queues is not None:
        sql += f" AND {qn('queue')} IN ({', '.join(['%s'] * len(rule.queues))})"
        params.extend(rule.queues)
    elif rule.except_queues:
        sql += f" AND {qn('queue')} NOT IN ({', '.join(['%s'] * len(rule.except_queues))})"
        params.extend(rule.except_queues)
    return sql, params


def prune_batch(rule: PruneRule, using: str, batch: int) -> int:
    """Delete at most ``batch`` rows matching ``rule``; returns how many went."""
    Job = _job_model()

    _check(rule)
    connection = connections[using]
    vendor = connection.vendor
    qn = connection.ops.quote_name
    table = qn(Job._meta.db_table)
    where, params = _where(rule, qn, vendor)
    finished = ", ".join(["%s"] * len(FINISHED))

    if vendor == "postgresql":
        sql = f"""
            WITH picked AS MATERIALIZED (
                SELECT {qn("id")} FROM {table} WHERE {where}
                LIMIT %s FOR UPDATE SKIP LOCKED
            )
            DELETE FROM {table} AS j USING picked
            WHERE j.{qn("id")} = picked.{qn("id")} AND j.{qn("status")} IN ({finished})
            RETURNING j.{qn("id")}
        """

        def operation() -> int:
            with transaction.atomic(using=using), connection.cursor() as cursor:
                cursor.execute(sql, [*params, batch, *FINISHED])
                ids = [row[0] for row in cursor.fetchall()]
                prune_workflow_rows(using, ids)
                return len(ids)

    elif vendor == "sqlite":
        sql = f"""
            DELETE FROM {table} WHERE {qn("id")} IN (
                SELECT {qn("id")} FROM {table} WHERE {where} LIMIT %s
            ) AND {qn("status")} IN ({finished})
            RETURNING {qn("id")}
        """

        def operation() -> int:
            with transaction.atomic(using=using), connection.cursor() as cursor:
                cursor.execute(sql, [*params, batch, *FINISHED])
                ids = [row[0] for row in cursor.fetchall()]
                prune_workflow_rows(using, ids)
                return len(ids)

    else:

        def operation() -> int:
            with transaction.atomic(using=using):
                ids = list(
                    # No ORDER BY: the model's default ordering made MariaDB's
                    # SKIP LOCKED read return nothing while any row was locked.
                    _queryset(rule, using)
                    .order_by()
                    .select_for_update(skip_locked=True)
                    .values_list("id", flat=True)[:batch]
                )
                if not ids:
                    return 0
                # One primary-key lookup per row: these rows are locked by us and were
                # read finished under that lock. A single ``id IN (…)`` DELETE was seen
                # (MariaDB 10.11) to wait on a row another pruner held, so that batches
                # queued behind each other instead of skipping.
                pk = Job._meta.pk
                assert pk is not None
                with connection.cursor() as cursor:
                    cursor.executemany(
                        f"DELETE FROM {table} WHERE {qn('id')} = %s",
                        [[pk.get_db_prep_value(value, connection)] for value in ids],
                    )
                prune_workflow_rows(using, ids)
                return len(ids)

    return retry_on_lock_conflict(using, operation)


def prune_workflow_rows(using: str, job_ids: list[Any]) -> None:
    """The node and edge rows of jobs just deleted, then the finished workflows and
    batches left without a node; in the deleting transaction."""
    Job = _job_model()
    from django_arcature.workflows.models import (
        BatchCounter,
        BatchRun,
        WorkflowCounter,
        WorkflowEdge,
        WorkflowNode,
        WorkflowRun,
    )

    if not job_ids:
        return
    pk = Job._meta.pk
    assert pk is not None
    ids = [pk.to_python(value) for value in job_ids]
    nodes = WorkflowNode.objects.using(using).filter(job_id__in=ids)
    owners = list(nodes.values_list("workflow_id", "batch_id"))
    if not owners:
        return
    edges = WorkflowEdge.objects.using(using)
    edges.filter(upstream_id__in=ids).delete()
    edges.filter(downstream_id__in=ids).delete()
    nodes.delete()
    workflows = {workflow for workflow, _ in owners if workflow is not None}
    batches = {batch for _, batch in owners if batch is not None}
    empty = list(
        WorkflowRun.objects.using(using)
        .filter(id__in=workflows)
        .exclude(outcome="")
        .exclude(Exists(WorkflowNode.objects.using(using).filter(workflow_id=OuterRef("id"))))
        .values_list("id", flat=True)
    )
    if empty:
        edges.filter(workflow_id__in=empty).delete()
        WorkflowCounter.objects.using(using).filter(workflow_id__in=empty).delete()
        WorkflowRun.objects.using(using).filter(id__in=empty).delete()
    done = list(
        BatchRun.objects.using(using)
        .filter(id__in=batches)
        .exclude(outcome="")
        .exclude(Exists(WorkflowNode.objects.using(using).filter(batch_id=OuterRef("id"))))
        .values_list("id", flat=True)
    )
    if done:
        BatchCounter.objects.using(using).filter(batch_id__in=done).delete()
        BatchRun.objects.using(using).filter(id__in=done).delete()
    logger.debug(
        "pruned %d nodes; %d workflows and %d batches with them", len(owners), len(empty), len(done)
    )


def prune(
    rules: list[PruneRule], using: str, *, batch: int = 1000, max_batches: int | None = None
) -> list[PruneResult]:
    """Apply each rule batch by batch until nothing is left (or ``max_batches`` per rule)."""
    results = []
    for rule in rules:
        deleted = batches = 0
        while max_batches is None or batches < max_batches:
            count = prune_batch(rule, using, batch)
            batches += 1
            deleted += count
            if count < batch:
                break
        results.append(PruneResult(rule, deleted, batches))
    return results
