"""Fenced completions: running → succeeded, pending (retry) or dead, only under the claim."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction

from django_arcature.db import driver_for
from django_arcature.db import retry_on_lock_conflict as _retry_on_lock_conflict
from django_arcature.transitions import (
    ClaimTransition,
    Completion,
    announce,
    transition_fields,
)

from .base import JobWriter

if TYPE_CHECKING:
    pass


class CompletionWrites(JobWriter):
    """Each completion is a named transition applied through the fence."""

    def _apply(
        self,
        completion: Completion,
        fields: dict[str, Any],
    ) -> ClaimTransition:
        rows = self._fenced(completion.job_id, completion.claim_token).update(**fields)
        outcome = ClaimTransition.from_rowcount(rows)
        announce(self.model, completion, outcome)
        return outcome

    def mark_succeeded(
        self,
        job_id: uuid.UUID,
        claim_token: uuid.UUID,
        result: Any = None,
        *,
        attempt_log: list[Any] | None = None,
    ) -> ClaimTransition:
        """running → succeeded, only under this claim."""
        completion = Completion(
            job_id, claim_token, "succeeded", result=result, attempt_log=attempt_log
        )
        return self._write_one(completion)

    def mark_retry(
        self,
        job_id: uuid.UUID,
        claim_token: uuid.UUID,
        available_at: datetime,
        message: str,
        *,
        traceback: str = "",
        attempt_log: list[Any] | None = None,
    ) -> ClaimTransition:
        """running → pending (claimable again at ``available_at``), only under this claim."""
        completion = Completion(
            job_id,
            claim_token,
            "retry",
            available_at=available_at,
            message=message,
            traceback=traceback,
            attempt_log=attempt_log,
        )
        return self._write_one(completion)

    def mark_dead(
        self,
        job_id: uuid.UUID,
        claim_token: uuid.UUID,
        error_kind: str,
        message: str,
        *,
        traceback: str = "",
        attempt_log: list[Any] | None = None,
    ) -> ClaimTransition:
        """running → dead with a kind and a reason, only under this claim."""
        completion = Completion(
            job_id,
            claim_token,
            "dead",
            error_kind=str(error_kind),
            message=message,
            traceback=traceback,
            attempt_log=attempt_log,
        )
        return self._write_one(completion)

    def _write_one(self, completion: Completion) -> ClaimTransition:
        if driver_for(self.db).fences_by_join():  # the row by primary key (see the driver)
            return self.complete_batch([completion])[0]
        fields = transition_fields(completion)
        return _retry_on_lock_conflict(self.db, lambda: self._apply(completion, fields))

    def complete_many(self, completions: Sequence[Completion]) -> list[ClaimTransition]:
        """Apply many fenced completions in one transaction (one commit for a batch).

        Each row is still fenced on its own id and token, and each gets its own
        UPDATED/LOST; observer events are sent after the commit, for UPDATED
        rows only.
        """
        if not completions:
            return []
        field_sets = [transition_fields(c) for c in completions]

        def operation() -> list[ClaimTransition]:
            with transaction.atomic(using=self.db):
                return [
                    ClaimTransition.from_rowcount(
                        self._fenced(c.job_id, c.claim_token).update(**fields)
                    )
                    for c, fields in zip(completions, field_sets, strict=True)
                ]

        outcomes = _retry_on_lock_conflict(self.db, operation)
        for completion, outcome in zip(completions, outcomes, strict=True):
            announce(self.model, completion, outcome)
        return outcomes

    def complete_batch(self, completions: Sequence[Completion]) -> list[ClaimTransition]:
        """Like :meth:`complete_many`, in one UPDATE per transition where the database can.

        Same fields (``transition_fields``), same per-row fence on id, token and
        ``status = 'running'``, same events after the commit; on PostgreSQL and
        SQLite each group of same-kind completions is a single ``UPDATE … FROM
        (VALUES …) RETURNING id`` instead of one statement per job. Elsewhere it
        is :meth:`complete_many`.
        """
        if not completions:
            return []
        driver = driver_for(self.db)
        if not driver.supports_batch_completion():
            return self.complete_many(completions)
        groups: dict[tuple[str, ...], list[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]]] = {}
        for completion in completions:
            fields = transition_fields(completion)
            groups.setdefault(tuple(fields), []).append(
                (completion.job_id, completion.claim_token, fields)
            )
        size = driver.BATCH_COMPLETION_ROWS

        def operation() -> set[uuid.UUID]:
            updated: set[uuid.UUID] = set()
            with transaction.atomic(using=self.db):
                for rows in groups.values():
                    for start in range(0, len(rows), size):
                        updated |= driver.complete_batch(self.model, rows[start : start + size])
            return updated

        updated = _retry_on_lock_conflict(self.db, operation)
        outcomes = [
            ClaimTransition.UPDATED if c.job_id in updated else ClaimTransition.LOST
            for c in completions
        ]
        for completion, outcome in zip(completions, outcomes, strict=True):
            announce(self.model, completion, outcome)
        return outcomes
