"""``Workflow`` and ``Batch``: build a graph of jobs in memory, then enqueue it in one go.

Everything is checked before anything is written (unknown nodes, cycles, the
size limits, each node's arguments as for ``.enqueue()``), so a refused workflow
writes nothing; ``enqueue()`` then writes every row in the caller's transaction,
or in one of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from django_arcature.conf import get_settings, job_database
from django_arcature.exceptions import ArcatureError

from . import eager

if TYPE_CHECKING:
    from django_arcature.manager.workflow_writes import NodeRow
    from django_arcature.models import Job
    from django_arcature.workflows.models import BatchRun, WorkflowRun

__all__ = ["Batch", "Node", "Workflow", "WorkflowError"]

WHEN_VALUES = ("succeeded", "failed", "always")


class WorkflowError(ArcatureError, ValueError):
    """A workflow or batch that cannot be enqueued as built (the message says why)."""


def _task_name(task: Any) -> str:
    if hasattr(task, "module_path") and hasattr(task, "func"):
        # A django.tasks Task: its ``name`` is the bare function name, which would be
        # stored as a task nobody registered. Refused rather than enqueued to fail.
        raise WorkflowError(
            f"{task.module_path} is a django.tasks Task: workflow nodes and batch members "
            "(and batch callbacks) are @job handles or registered task names "
            "(see the django.tasks reference, 'Workflows and batches')"
        )
    name = getattr(task, "name", task)
    if not isinstance(name, str):
        raise TypeError(f"a node's task must be a @job handle or a task name, not {task!r}")
    return name


_NODE_UNIQUE_KEY = "a workflow node cannot have its own unique_key: give the workflow a key instead"


def _options(task: Any, unique_key_refusal: str = _NODE_UNIQUE_KEY) -> dict[str, Any]:
    """``handle.using(queue=..., priority=..., max_attempts=...)`` carried onto the node
    (or a batch callback); a handle with its own unique_key is refused with
    ``unique_key_refusal``."""
    options = getattr(task, "options", None)
    if options is None:
        return {}
    if getattr(options, "unique_key", None) is not None:
        raise WorkflowError(unique_key_refusal)
    return {
        name: value
        for name in ("queue", "priority", "max_attempts", "delay", "run_at")
        if (value := getattr(options, name, None)) is not None
    }


class Node:
    """One job of a workflow; ``job_id`` is its job's id from the start."""

    def __init__(
        self,
        workflow: Workflow,
        task: Any,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        name: str,
        when: str,
    ) -> None:
        self.workflow = workflow
        self.task = task
        self.args = list(args)
        self.kwargs = dict(kwargs)
        self.name = name
        self.when = when
        self.job_id = uuid.uuid4()
        self.upstream: list[Node] = []

    def __repr__(self) -> str:
        return f"<Node {self.name} of {self.workflow.name!r}>"

    def after(self, *nodes: Node) -> Node:
        """Add dependencies; checked (unknown nodes, cycles) when the workflow is enqueued."""
        if self.workflow.enqueued:
            raise WorkflowError(f"{self.workflow.name!r} is already enqueued")
        known = {id(node) for node in self.upstream}
        for node in nodes:
            if not isinstance(node, Node):
                raise WorkflowError(
                    f"{self.name}: after= takes nodes of this workflow, not {node!r}"
                )
            if id(node) not in known:
                known.add(id(node))
                self.upstream.append(node)
        return self

    @property
    def job(self) -> Job:
        """This node's job as stored now (after ``enqueue()``)."""
        from django_arcature.models import Job

        workflow = self.workflow
        if workflow.enqueued and not workflow.created:
            raise WorkflowError(
                f"node {self.name!r} was never written: a live workflow already held the key "
                f"{workflow.key!r}, so enqueue() wrote nothing and returned that one "
                f"(created is False, id {workflow.id}); read its jobs from "
                "WorkflowNode.objects.filter(workflow_id=flow.id)"
            )
        return Job.objects.db_manager(workflow.using).get(id=self.job_id)


class Workflow:
    """Jobs that wait for jobs: build with :meth:`add`, write with :meth:`enqueue`.

    ``key``: at most one live workflow holds it; enqueueing another with the same
    key returns the live one (``created`` is then False) and writes nothing.
    """

    def __init__(self, name: str, *, key: str | None = None, using: str | None = None) -> None:
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise WorkflowError(f"a workflow's name is 1 to 200 characters, not {name!r}")
        if key is not None and (not isinstance(key, str) or not key or len(key) > 255):
            raise WorkflowError(f"a workflow's key is 1 to 255 characters, not {key!r}")
        self.name = name
        self.key = key
        self.using = job_database(using)
        self.nodes: list[Node] = []
        self._names: set[str] = set()
        #: The last serial given per task name ("step", "step-2", …): no rescans.
        self._serials: dict[str, int] = {}
        self.run: WorkflowRun | None = None
        self.created = False

    @property
    def enqueued(self) -> bool:
        return self.run is not None

    @property
    def id(self) -> uuid.UUID | None:
        return self.run.id if self.run is not None else None

    def add(
        self,
        task: Any,
        *args: Any,
        after: Iterable[Node] = (),
        when: str = "succeeded",
        **kwargs: Any,
    ) -> Node:
        """A node running ``task(*args, **kwargs)`` once every node in ``after`` has ended
        as ``when`` asks: ``"succeeded"`` (default), ``"failed"`` (died) or ``"always"``."""
        if self.enqueued:
            raise WorkflowError(f"{self.name!r} is already enqueued: build a new Workflow")
        if when not in WHEN_VALUES:
            raise WorkflowError(f"when must be one of {', '.join(WHEN_VALUES)}, not {when!r}")
        limit = get_settings().workflow_max_nodes
        if len(self.nodes) >= limit:
            raise WorkflowError(
                f"{self.name!r} would have more than {limit} nodes "
                "(ARCATURE['WORKFLOW_MAX_NODES']): split it, or raise the setting"
            )
        base = _task_name(task).rsplit(".", 1)[-1][:180]
        name = base
        serial = self._serials.get(base, 1)
        while name in self._names:
            serial += 1
            name = f"{base}-{serial}"
        self._serials[base] = serial
        node = Node(self, task, args, kwargs, name, when)
        if isinstance(after, Node):
            after = [after]
        node.after(*after)
        self.nodes.append(node)
        self._names.add(name)
        return node

    def check(self) -> None:
        """Refuse unknown nodes, cycles and dependencies past the limits, before writing."""
        conf = get_settings()
        mine = {id(node) for node in self.nodes}
        for node in self.nodes:
            if node.when != "succeeded" and not node.upstream:
                # Nothing to wait for: it would run at once (a refund beside the charge).
                raise WorkflowError(
                    f"node {node.name!r} has when={node.when!r} but waits for nothing: with "
                    "no after=[...] it would run at once; name the nodes it follows"
                )
            for up in node.upstream:
                if id(up) not in mine:
                    raise WorkflowError(
                        f"node {node.name!r} waits for {up.name!r}, which is not a node of "
                        f"{self.name!r} (it belongs to {up.workflow.name!r})"
                    )
            if len(node.upstream) > conf.workflow_max_edges_per_node:
                raise WorkflowError(
                    f"node {node.name!r} waits for {len(node.upstream)} nodes, more than "
                    f"{conf.workflow_max_edges_per_node} "
                    "(ARCATURE['WORKFLOW_MAX_EDGES_PER_NODE'])"
                )
        cycle = _find_cycle(self.nodes)
        if cycle:
            path = " → ".join(node.name for node in cycle)
            raise WorkflowError(f"{self.name!r} has a cycle: {path}")

    def enqueue(self) -> Workflow:
        """Write every node, edge and the workflow row, in the caller's transaction if any."""
        from django_arcature.manager.workflow_writes import NodeRow
        from django_arcature.models import Job

        if self.enqueued:
            raise WorkflowError(f"{self.name!r} is already enqueued")
        if not self.nodes:
            raise WorkflowError(f"{self.name!r} has no nodes")
        self.check()
        downstream = {id(up) for node in self.nodes for up in node.upstream}
        rows = [
            NodeRow(
                job_id=node.job_id,
                task=node.task,
                name=node.name,
                args=node.args,
                kwargs=node.kwargs,
                options=_options(node.task),
                after=[up.job_id for up in node.upstream],
                when=node.when,
                has_dependents=id(node) in downstream,
            )
            for node in self.nodes
        ]
        self.run, self.created = Job.objects.db_manager(self.using).enqueue_workflow(
            self.name, self.key, rows
        )
        if self.created and eager.enabled():
            self._run_eagerly()
        return self

    def _run_eagerly(self) -> None:
        """``ARCATURE["EAGER"]``: run the ready nodes, then what each completion releases."""
        dependents: dict[uuid.UUID, list[uuid.UUID]] = {}
        for node in self.nodes:
            for up in node.upstream:
                dependents.setdefault(up.job_id, []).append(node.job_id)
        ready = [node.job_id for node in self.nodes if not node.upstream]
        eager.run(self.using, ready, dependents)

    def cancel(self) -> int:
        """Cancel the workflow's waiting, pending and running nodes."""
        if self.run is None:
            raise WorkflowError(f"{self.name!r} is not enqueued")
        return cancel_workflow(self.run.id, using=self.using)


def cancel_workflow(workflow_id: uuid.UUID, *, using: str | None = None) -> int:
    from django_arcature.models import Job

    return Job.objects.db_manager(job_database(using)).cancel_workflow(workflow_id)


def _find_cycle(nodes: Sequence[Node]) -> list[Node]:
    """One cycle among ``nodes`` (first node repeated at the end), or [] if there is none."""
    white, grey, black = 0, 1, 2
    color = {id(node): white for node in nodes}
    for start in nodes:
        if color[id(start)] != white:
            continue
        stack: list[tuple[Node, int]] = [(start, 0)]
        path: list[Node] = [start]
        color[id(start)] = grey
        while stack:
            node, index = stack[-1]
            if index < len(node.upstream):
                stack[-1] = (node, index + 1)
                up = node.upstream[index]
                if color.get(id(up)) == grey:
                    cut = path.index(up)
                    return list(reversed([*path[cut:], up]))
                if color.get(id(up)) == white:
                    color[id(up)] = grey
                    stack.append((up, 0))
                    path.append(up)
            else:
                color[id(node)] = black
                stack.pop()
                path.pop()
    return []


def _callback_name(role: str, task: Any) -> str:
    """The callback's task name, once its handler is known to take the batch's id.

    A callback is enqueued in the transaction of the last member's completion, in a
    worker, long after this call: a handler that cannot take one string argument
    would be refused there, where nobody can fix it. So it is refused here, as an
    ``.enqueue()`` with the wrong arguments is.
    """
    from django_arcature.exceptions import MalformedPayload
    from django_arcature.registry import prepare_enqueue

    if task is None:
        return ""
    name = _task_name(task)
    probe = str(uuid.uuid4())
    try:
        prepare_enqueue(task, [probe], {})
    except MalformedPayload as exc:
        reason = str(exc).replace(repr(probe), "<the batch's id>")
        raise WorkflowError(
            f"Batch({role}={name!r}): a batch callback is called with one argument, the "
            f"batch's id as a string (e.g. def notify_done(batch_id: str)), and {reason}"
        ) from None
    return name


def _callback_options(role: str, task: Any) -> dict[str, Any]:
    """``callback.using(queue=..., ...)`` as stored, to be applied when the callback fires."""
    from .callback_options import stored_form

    refusal = (
        f"Batch({role}=...): a batch callback cannot have its own unique_key; "
        "it is enqueued once per batch already"
    )
    return stored_form(_options(task, refusal))


class Batch:
    """Jobs that finish together: ``on_success`` runs if none died, ``on_finish`` always.

    Each callback is a ``@job`` handle (or task name) called with the batch's id
    (a string), once, when the batch is closed and its last member has finished.
    ``enqueue(close=False)`` keeps the batch open: :meth:`open` it again later
    (in another transaction) to add members, and :meth:`close` it when done.
    """

    def __init__(
        self,
        *,
        on_success: Any = None,
        on_finish: Any = None,
        name: str = "",
        using: str | None = None,
    ) -> None:
        if not isinstance(name, str) or len(name) > 200:
            # The column is 200 characters: PostgreSQL and MariaDB would refuse it at the
            # write, SQLite would keep it whole.
            raise WorkflowError(f"a batch's name is 0 to 200 characters, not {name!r}")
        self.on_success = _callback_name("on_success", on_success)
        self.on_finish = _callback_name("on_finish", on_finish)
        self.callback_options = {
            role: carried
            for role, task in (("on_success", on_success), ("on_finish", on_finish))
            if (carried := _callback_options(role, task))
        }
        self.name = name
        self.using = job_database(using)
        self.id: uuid.UUID | None = None
        self.members: list[NodeRow] = []
        self.run: BatchRun | None = None

    @classmethod
    def open(cls, batch_id: uuid.UUID | str, *, using: str | None = None) -> Batch:
        """A handle on an enqueued, still open batch, to add members to it.

        A batch id that names no batch raises ``LookupError`` here, where the id was
        passed, rather than at the handle's ``enqueue()`` (or never, for ``close()``).
        """
        from django_arcature.workflows.models import BatchRun

        batch = cls(using=using)
        batch.id = uuid.UUID(str(batch_id))
        if not BatchRun.objects.using(batch.using).filter(id=batch.id).exists():
            raise LookupError(f"no batch {batch.id} (Batch.open takes the id of an enqueued batch)")
        return batch

    def add(self, task: Any, *args: Any, **kwargs: Any) -> uuid.UUID:
        """Add a member running ``task(*args, **kwargs)``; returns its job's id."""
        from django_arcature.manager.workflow_writes import NodeRow

        row = NodeRow(
            job_id=uuid.uuid4(),
            task=task,
            name=_task_name(task).rsplit(".", 1)[-1][:200],
            args=list(args),
            kwargs=dict(kwargs),
            options=_options(task),
        )
        self.members.append(row)
        return row.job_id

    def enqueue(self, *, close: bool = True) -> Batch:
        """Write the members added since the last enqueue (and the batch, the first time)."""
        from django_arcature.models import Job

        conf = get_settings()
        self.run = Job.objects.db_manager(self.using).enqueue_batch(
            self.id,
            self.members,
            name=self.name,
            on_success=self.on_success,
            on_finish=self.on_finish,
            callback_options=self.callback_options,
            close=close,
            limit=conf.batch_max_members,
        )
        self.id = self.run.id
        added, self.members = self.members, []
        if eager.enabled() and added:
            eager.run(self.using, [row.job_id for row in added])
        return self

    def close(self) -> None:
        """No more members; the callbacks fire when the last one finishes (at once if it has)."""
        from django_arcature.models import Job

        Job.objects.db_manager(self.using).close_batch(self._id())

    def cancel(self) -> int:
        """Cancel the unfinished members; the callbacks are then never enqueued."""
        from django_arcature.models import Job

        return Job.objects.db_manager(self.using).cancel_batch(self._id())

    def counts(self) -> dict[str, int]:
        """``total``, ``succeeded``, ``dead``, ``cancelled`` and ``pending`` (not finished)."""
        from django_arcature.manager.dependencies import batch_counts

        return batch_counts(self.using, self._id())

    def _id(self) -> uuid.UUID:
        if self.id is None:
            raise WorkflowError("the batch is not enqueued yet")
        return self.id
