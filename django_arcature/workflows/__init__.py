"""Workflows and batches: jobs that wait for other jobs (DESIGN §11).

A node of a workflow is an ordinary job row that starts ``waiting`` (invisible
to the claim) unless it has no dependencies. Each dependency is one
:class:`~django_arcature.workflows.models.WorkflowEdge` row. When a fenced
completion, the sweep or an operator finishes a job, the same transaction marks
that job's outgoing edges and moves each dependent whose edges are all met to
``pending`` (or to ``cancelled``, naming the upstream node, when its ``when``
can no longer be met): see :mod:`django_arcature.manager.dependencies`.

The public names (``Workflow``, ``Batch``, ``Snooze``) are importable from
``django_arcature``; nothing here is imported with the package.
"""
