"""Which queues exist, as far as an operator can tell: the ones something names.

A queue has no table of its own: it is a name on jobs, on ``@job(queue=...)``, in
``ARCATURE["QUEUES"]``, or on a pause flag. The Queues admin page and
``arcature_queue`` both list and accept these, so a queue shows (and can be
paused) before it ever has a control row, and a typo is told apart from a queue.
"""

from __future__ import annotations

__all__ = ["named_queues"]


def named_queues(using: str, *, with_rows: bool = True) -> set[str]:
    """The default queue, every handler's ``@job(queue=...)``, every ``QUEUES`` entry, every
    queue with a pending or running job and (``with_rows``) every control row."""
    from django_arcature import registry
    from django_arcature.conf import get_settings
    from django_arcature.models import Job, JobStatus

    from .limits import configured_queues
    from .models import QueueState

    default = get_settings().default_queue
    registry.autodiscover()
    names = {default}
    for name in registry.registered_names():
        names.add(registry.get(name).queue or default)
    names.update(configured_queues())
    live = Job.objects.using(using).filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING])
    names.update(live.values_list("queue", flat=True).order_by().distinct())
    if with_rows:
        names.update(QueueState.objects.using(using).values_list("name", flat=True))
    return names
