"""Every write to a job row goes through here: enqueue, claim, fenced completion, sweep, admin.

The worker, the admin, the django.tasks backend and ``@job`` call these
methods; nothing else issues an UPDATE on the job table. Each completion is a
named transition (``transitions``) applied only through the fence, so no
caller can forget the fence or mix two outcomes. Vendor differences are the
database driver's (``db``); the manager is the same on every database. Its
methods live in ``manager/``, one module per concern.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import models

from .db import ClaimedJob
from .manager.completions import CompletionWrites
from .manager.enqueue import EnqueueWrites, set_eager_runner
from .manager.leases import LeaseWrites
from .manager.operations import OperatorWrites
from .manager.workflow_writes import WorkflowWrites
from .transitions import ClaimTransition, Completion

if TYPE_CHECKING:
    from .models import Job  # noqa: F401  (named in the base class below)

__all__ = ["ClaimTransition", "ClaimedJob", "Completion", "JobManager", "set_eager_runner"]


class JobManager(
    EnqueueWrites,
    LeaseWrites,
    CompletionWrites,
    OperatorWrites,
    WorkflowWrites,
    models.Manager["Job"],
):
    """The only writer of job rows (DESIGN §4)."""
