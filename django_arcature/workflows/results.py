"""What a running node reads of its upstream nodes, and the progress it reports."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from django_arcature.conf import get_settings, job_database
from django_arcature.exceptions import ArcatureError

if TYPE_CHECKING:
    from django_arcature.context import JobContext


class UpstreamTooLarge(ArcatureError, ValueError):
    """The upstream results would exceed ``ARCATURE["UPSTREAM_MAX_BYTES"]``."""


def upstream_results(job_id: uuid.UUID, using: str | None = None) -> dict[str, Any]:
    """``{node name: result}`` of the direct dependencies of the node ``job_id``."""
    from django_arcature.models import Job
    from django_arcature.workflows.models import WorkflowEdge, WorkflowNode

    using = job_database(using)
    limit = get_settings().upstream_max_bytes
    ups = list(
        WorkflowEdge.objects.using(using)
        .filter(downstream_id=job_id)
        .values_list("upstream_id", flat=True)
    )
    if not ups:
        return {}
    names = dict(
        WorkflowNode.objects.using(using).filter(job_id__in=ups).values_list("job_id", "name")
    )
    results: dict[str, Any] = {}
    size = 0
    for up_id, result in (
        Job.objects.using(using).filter(id__in=ups).order_by("id").values_list("id", "result")
    ):
        size += len(json.dumps(result, separators=(",", ":"), default=str))
        if size > limit:
            raise UpstreamTooLarge(
                f"the results of this node's {len(ups)} upstream nodes exceed {limit} bytes "
                "(ARCATURE['UPSTREAM_MAX_BYTES']): have upstream jobs return a reference "
                "(a primary key, a file name) instead of the data, or raise the setting"
            )
        results[names.get(up_id, str(up_id))] = result
    return results


def write_progress(
    context: JobContext, fraction: float, message: str, now: float, last: float
) -> bool:
    """Write unless throttled (a finished 1.0 is never held back); fenced on the claim."""
    from django_arcature.models import Job

    if context.claim_token is None:
        return False
    if fraction < 1.0 and now - last < get_settings().progress_interval:
        return False
    return Job.objects.db_manager(job_database()).set_progress(
        context.job_id, context.claim_token, fraction, message[:255]
    )


def progress_of(job_id: uuid.UUID, using: str | None = None) -> tuple[float, str] | None:
    """The last progress a job reported: (fraction, message), or None."""
    from django_arcature.workflows.models import JobProgress

    row = (
        JobProgress.objects.using(job_database(using))
        .filter(job_id=job_id)
        .values_list("fraction", "message")
        .first()
    )
    return (float(row[0]), str(row[1])) if row else None
