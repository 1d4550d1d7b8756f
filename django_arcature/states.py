"""The states a job moves through and the kinds of death, shared by the model and its writer.

Apart from ``models`` so the manager (which ``models`` imports) can name them
without importing the model module back.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class JobStatus(models.TextChoices):
    """Where a job is in its life (DESIGN §2); values are the seed's."""

    PENDING = "pending", _("pending")
    RUNNING = "running", _("running")
    SUCCEEDED = "succeeded", _("succeeded")
    DEAD = "dead", _("dead")
    CANCELLED = "cancelled", _("cancelled")
    #: A workflow node whose dependencies are not met yet (``django_arcature.workflows``).
    #: The claim reads ``status = 'pending'`` only, so it never sees these rows: on
    #: PostgreSQL they are not even in the claim's partial indexes.
    WAITING = "waiting", _("waiting")


class ErrorKind(models.TextChoices):
    """Why a job is dead; values are the seed's ``ErrorKind::as_str``."""

    PERMANENT = "permanent", _("permanent")
    EXHAUSTED = "exhausted", _("exhausted")
    MALFORMED = "malformed", _("malformed")
    UNKNOWN = "unknown", _("unknown")
    PANIC = "panic", _("panic")
    TIMEOUT = "timeout", _("timeout")


#: Statuses a job can still leave on its own; a unique key is held only in these.
ACTIVE_STATUSES = (JobStatus.PENDING, JobStatus.RUNNING)

#: Statuses a job is finished in: ``Job.wait()`` returns once a job reaches one.
FINISHED_STATUSES = (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED)
