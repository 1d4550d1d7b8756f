"""What the workflow and batch pages show, read in a bounded number of queries.

Kept apart from the ModelAdmins (``admin/workflows.py``) so the reads can be
tested and reasoned about alone: node counts by state (one grouped query), a page
of nodes (two), the graph (four, from a bounded prefix of the edges, see
``workflow_graph``), a batch's callbacks (one, indexed and bounded).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.text import Truncator
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_arcature.models import Job, JobStatus
from django_arcature.workflows.models import BatchRun, WorkflowEdge, WorkflowNode, WorkflowRun

from .workflow_graph import Graph, NodeInfo, build_graph, choose

#: Edges read to lay the graph out (the first ones written: a prefix of the workflow).
GRAPH_EDGE_LIMIT = 1_000
#: A workflow with at most this many nodes is drawn from all of them (nodes without edges too).
GRAPH_NODE_LIMIT = 500
#: Rows of the node (or member) table per page.
NODES_PER_PAGE = 50
#: The most characters of an operator's cancel reason kept.
REASON_MAX_LENGTH = 500
#: Statuses in the order the pages list them.
STATUS_ORDER = (
    JobStatus.WAITING,
    JobStatus.PENDING,
    JobStatus.RUNNING,
    JobStatus.SUCCEEDED,
    JobStatus.DEAD,
    JobStatus.CANCELLED,
)
LIVE = (JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING)


def _job_url(job_id: Any) -> str:
    return reverse("admin:django_arcature_job_change", args=[job_id])


@dataclass(frozen=True)
class NodeRow:
    """One row of a node table."""

    id: uuid.UUID
    name: str
    task: str
    status: str
    status_label: str
    reason: str
    reason_full: str
    url: str


@dataclass(frozen=True)
class Page:
    number: int
    count: int
    rows: list[NodeRow]
    previous_url: str
    next_url: str
    status: str
    status_label: str
    pages: int


def status_label(status: str) -> str:
    try:
        return str(JobStatus(status).label)
    except ValueError:
        return status


def status_counts(using: str, members: QuerySet[WorkflowNode]) -> list[dict[str, Any]]:
    """How many nodes are in each state: one grouped query over the nodes' jobs."""
    counts = dict(
        Job.objects.using(using)
        .filter(id__in=members.values("job_id"))
        .order_by()
        .values_list("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    return [
        {"status": status, "label": status_label(status), "count": int(counts.get(status, 0))}
        for status in STATUS_ORDER
    ]


def node_page(
    request: HttpRequest,
    using: str,
    members: QuerySet[WorkflowNode],
    counts: list[dict[str, Any]],
    ordering: tuple[str, ...] = ("name", "job_id"),
    everything: int | None = None,
) -> Page:
    """One page of nodes, optionally of one state: two queries.

    A workflow's nodes are paged by name (its unique index); a batch's members,
    which all share their task's name, by job id.
    """
    status = request.GET.get("status", "")
    if status not in STATUS_ORDER:
        status = ""
    if not status and everything is not None:
        total = everything  # nodes whose job was pruned are still listed
    else:
        total = sum(c["count"] for c in counts if not status or c["status"] == status)
    pages = max(1, -(-total // NODES_PER_PAGE))
    try:
        number = min(max(int(request.GET.get("page", "1")), 1), pages)
    except ValueError:
        number = 1
    if status:
        members = members.filter(
            job_id__in=Job.objects.using(using).filter(status=status).values("id")
        )
    start = (number - 1) * NODES_PER_PAGE
    nodes = list(
        members.using(using)
        .order_by(*ordering)
        .values_list("job_id", "name")[start : start + NODES_PER_PAGE]
    )
    jobs = {
        job_id: (task, job_status, error)
        for job_id, task, job_status, error in Job.objects.using(using)
        .filter(id__in=[job_id for job_id, _ in nodes])
        .values_list("id", "task_name", "status", "last_error")
    }
    rows = []
    for job_id, name in nodes:
        task, job_status, error = jobs.get(job_id, ("", "", ""))
        rows.append(
            NodeRow(
                id=job_id,
                name=name,
                task=task,
                status=job_status,
                status_label=status_label(job_status) if job_status else _("pruned"),
                reason=Truncator(error).chars(120),
                reason_full=Truncator(error).chars(1000),
                url=_job_url(job_id),
            )
        )

    def link(page: int) -> str:
        query = request.GET.copy()
        query["page"] = str(page)
        return "?" + query.urlencode()

    return Page(
        number=number,
        count=total,
        rows=rows,
        previous_url=link(number - 1) if number > 1 else "",
        next_url=link(number + 1) if number < pages else "",
        status=status,
        status_label=status_label(status) if status else "",
        pages=pages,
    )


def workflow_graph(using: str, run: WorkflowRun) -> Graph:
    """The graph of a workflow, or of its first ``GRAPH_EDGE_LIMIT`` edges: four queries.

    Edges are written in the order the nodes were added, and a node can only
    depend on nodes added before it, so the first edges hold every dependency of
    the nodes they reach: the layers drawn are the true ones for those nodes.
    """
    edges = list(
        WorkflowEdge.objects.using(using)
        .filter(workflow_id=run.id)
        .order_by("id")
        .values_list("upstream_id", "downstream_id")[: GRAPH_EDGE_LIMIT + 1]
    )
    partial = len(edges) > GRAPH_EDGE_LIMIT
    if partial:
        edges = edges[:GRAPH_EDGE_LIMIT]
        cut = edges[-1][1]  # its other edges may be beyond the limit
        edges = [edge for edge in edges if edge[1] != cut]
    order: list[uuid.UUID] = []
    seen: set[uuid.UUID] = set()
    if not partial and run.node_count <= GRAPH_NODE_LIMIT:
        everything = WorkflowNode.objects.using(using).filter(workflow_id=run.id)
        ids = list(everything.order_by("job_id").values_list("job_id", flat=True))
        with_upstream = {down for _, down in edges}
        # Roots first (the order they are named in edges, then the isolated ones).
        for up, _down in edges:
            if up not in seen and up not in with_upstream:
                seen.add(up)
                order.append(up)
        for job_id in ids:
            if job_id not in seen and job_id not in with_upstream:
                seen.add(job_id)
                order.append(job_id)
    else:
        partial = partial or run.node_count > GRAPH_NODE_LIMIT
    for up, down in edges:
        for node in (up, down):
            if node not in seen:
                seen.add(node)
                order.append(node)
    placement = choose(order, edges)
    placed = placement[0]
    drawn = list(placed)
    names = dict(
        WorkflowNode.objects.using(using).filter(job_id__in=drawn).values_list("job_id", "name")
    )
    jobs = {
        job_id: (task, status)
        for job_id, task, status in Job.objects.using(using)
        .filter(id__in=drawn)
        .values_list("id", "task_name", "status")
    }
    info = {}
    for job_id in drawn:
        if job_id not in names:
            continue
        task, status = jobs.get(job_id, ("", ""))
        info[job_id] = NodeInfo(
            name=names[job_id],
            task=task,
            status=status or "pruned",
            status_label=status_label(status) if status else _("pruned"),
            url=_job_url(job_id),
        )
    return build_graph(
        order,
        edges,
        info,
        title=_("Graph of the workflow %(name)s") % {"name": run.name},
        partial=partial,
        total=run.node_count,
        placement=placement,
    )


def progress_segments(counts: dict[str, int]) -> list[dict[str, Any]]:
    """The progress bar's parts, as percentages of the total (text says the numbers)."""
    total = counts["total"]
    if not total:
        return []
    return [
        {"name": name, "percent": f"{100 * counts[name] / total:.2f}"}
        for name in ("succeeded", "dead", "cancelled")
        if counts[name]
    ]


@dataclass(frozen=True)
class Callback:
    role: str
    task: str
    jobs: list[tuple[uuid.UUID, str, str]]
    list_url: str


#: For a batch fired before migration 0017 (no stored ids): how far from its
#: ``fired_at`` a callback job's ``created_at`` is looked for.
CALLBACK_WINDOW_SECONDS = 60
#: The most candidate jobs read to find such a batch's callbacks.
CALLBACK_CANDIDATES = 200


def batch_callbacks(using: str, run: BatchRun) -> list[Callback]:
    """The batch's callbacks and, once fired, their jobs: one primary-key query.

    The ids are stored in the transaction that enqueued the callbacks (with
    ``fired_at``); a batch fired before they were has them looked for by time
    and argument instead (:func:`_callbacks_by_time`). A pruned callback job is
    simply not listed.
    """
    roles = [
        (str(gettext_lazy("on success")), run.on_success, run.on_success_job_id),
        (str(gettext_lazy("on finish")), run.on_finish, run.on_finish_job_id),
    ]
    roles = [role for role in roles if role[1]]
    found: dict[str, list[tuple[uuid.UUID, str, str]]] = {}
    if run.fired_at is not None and roles:
        stored = {job_id: role for role, _, job_id in roles if job_id is not None}
        if stored:
            jobs = Job.objects.using(using).filter(id__in=list(stored)).values_list("id", "status")
            for job_id, status in jobs:
                found.setdefault(stored[job_id], []).append((job_id, status, status_label(status)))
        else:
            by_task = _callbacks_by_time(using, run, {task for _, task, _ in roles})
            found = {role: by_task.get(task, []) for role, task, _ in roles}
    jobs_url = reverse("admin:django_arcature_job_changelist")
    from urllib.parse import urlencode

    return [
        Callback(
            role=role,
            task=task,
            jobs=found.get(role, []),
            list_url=f"{jobs_url}?{urlencode({'task': task})}",
        )
        for role, task, _ in roles
    ]


def _callbacks_by_time(
    using: str, run: BatchRun, tasks: set[str]
) -> dict[str, list[tuple[uuid.UUID, str, str]]]:
    """A batch fired before 0017's callbacks, by task: enqueued in the transaction that
    set ``fired_at``, with the batch's id as their argument, so created within a moment
    of it (one indexed, bounded query)."""
    from datetime import timedelta

    assert run.fired_at is not None
    window = timedelta(seconds=CALLBACK_WINDOW_SECONDS)
    candidates = (
        Job.objects.using(using)
        .filter(
            task_name__in=sorted(tasks),
            created_at__gte=run.fired_at - window,
            created_at__lte=run.fired_at + window,
        )
        .order_by("created_at")
        .values_list("id", "task_name", "status", "payload")[:CALLBACK_CANDIDATES]
    )
    found: dict[str, list[tuple[uuid.UUID, str, str]]] = {}
    for job_id, task, status, payload in candidates:
        args = payload.get("args") if isinstance(payload, dict) else None
        if args == [str(run.id)]:
            found.setdefault(task, []).append((job_id, status, status_label(status)))
    return found
