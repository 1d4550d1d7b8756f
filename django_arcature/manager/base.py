"""What every part of the job table's one writer shares: the fence."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from django.db import models

from django_arcature.states import JobStatus

if TYPE_CHECKING:
    from django_arcature.models import Job


class JobWriter(models.Manager["Job"]):
    """The base of the manager's parts; not a manager of its own."""

    def _fenced(self, job_id: uuid.UUID, claim_token: uuid.UUID) -> models.QuerySet[Job]:
        """The fence: this job, still running, still under this claim."""
        return self.using(self.db).filter(
            id=job_id, status=JobStatus.RUNNING, claim_token=claim_token
        )
