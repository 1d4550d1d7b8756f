"""The steps the batch and workflow models share: one group of job rows driven through the manager.

Both models (``test_batch_model.py``, ``test_workflow_model.py``) claim members,
complete them under the current or a stale claim token, snooze them through the
worker's own ``snooze_completion``, age their leases on the database and sweep,
cancel them and requeue dead ones. What those writes must return, and what
they do to a member's status, attempts and tokens, is the same for a batch
member and a workflow node; only what a member's end does to the rest (a
batch's callbacks, a DAG's dependents) differs. So the writes and their
bookkeeping live here once, and each model keeps its own consequences in
:meth:`MemberMachine.land` and in what it does after the helpers return.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from datetime import timedelta
from typing import ClassVar

from django.db.models import F
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from django_arcature.core.decide import HandlerError
from django_arcature.db import ClaimedJob
from django_arcature.models import Job
from django_arcature.transitions import ClaimTransition, Completion
from django_arcature.worker.dispatch import snooze_completion
from tests.properties.conftest import TALLY

MAX_ATTEMPTS = 2


def completion(job_id: uuid.UUID, token: uuid.UUID, kind: str) -> Completion:
    """A fenced completion of ``kind``: ``succeeded``, ``dead`` (permanent) or ``retry`` (now)."""
    if kind == "succeeded":
        return Completion(job_id, token, "succeeded", result=1)
    if kind == "dead":
        return Completion(job_id, token, "dead", error_kind="permanent", message="no")
    return Completion(job_id, token, "retry", retry_delay=0.0, message="again")


class MemberMachine(RuleBasedStateMachine):
    """The members' rows and their model: statuses, attempts, live and stale claim tokens.

    A subclass calls :meth:`start` from its ``@initialize`` and says in :meth:`land`
    what a completion does beyond the member itself.
    """

    TALLY_NAME: ClassVar[str]

    ids: list[uuid.UUID]
    status: list[str]
    attempts: list[int]
    tokens: dict[int, uuid.UUID]
    claims: dict[int, ClaimedJob]
    stale: list[tuple[int, uuid.UUID]]
    steps: int

    def start(self, ids: list[uuid.UUID], status: list[str]) -> None:
        self.ids = ids
        self.status = status
        self.attempts = [0] * len(ids)
        self.tokens = {}
        self.claims = {}
        self.stale = []
        self.steps = 0
        TALLY.setdefault(self.TALLY_NAME, Counter())["examples"] += 1

    def step(self) -> None:
        TALLY[self.TALLY_NAME]["steps"] += 1
        self.steps += 1

    def pick(self, pick: int, *states: str) -> int:
        """A member in one of ``states`` if there is one (else any member): programs
        reach deep states instead of mostly refused steps."""
        eligible = [i for i, state in enumerate(self.status) if state in states]
        return eligible[pick % len(eligible)] if eligible else pick % len(self.ids)

    def land(self, i: int, kind: str) -> None:
        """Member ``i``'s completion of ``kind`` was written: update the model."""
        raise NotImplementedError

    # --- shared rules ------------------------------------------------------------------

    @rule(i=st.integers(0, 9))
    def claim(self, i: int) -> None:
        i = self.pick(i, "pending")
        claimed = Job.objects.claim_job(self.ids[i], "w", 60)
        if self.status[i] != "pending":
            assert claimed is None
            self.step()
            return
        assert claimed is not None
        if i in self.tokens:
            self.stale.append((i, self.tokens[i]))
        self.tokens[i] = claimed.claim_token
        self.claims[i] = claimed
        self.status[i] = "running"
        self.attempts[i] += 1
        self.step()

    @rule(i=st.integers(0, 9), stale=st.booleans())
    def snooze(self, i: int, stale: bool) -> None:
        """``raise Snooze(0)``: back to pending with its attempt given back; a stale
        claim's snooze is fenced out like any completion."""
        i = self.pick(i, "running")
        if self.status[i] != "running":
            self.step()
            return
        claimed = self.claims[i]
        if stale:
            olds = [token for node, token in self.stale if node == i]
            if not olds:
                self.step()
                return
            claimed = dataclasses.replace(claimed, claim_token=olds[-1])
        snoozed = snooze_completion(claimed, HandlerError("later", snooze=0.0), worker_id="w")
        assert isinstance(snoozed, Completion)
        written = Job.objects.complete_many([snoozed])
        if stale:
            assert written == [ClaimTransition.LOST]
        else:
            assert written == [ClaimTransition.UPDATED]
            self.attempts[i] -= 1
            self.land(i, "retry")
        self.step()

    # --- shared step bodies (the models' rules differ in what they draw) ---------------

    def complete_at(self, i: int, kind: str) -> None:
        i = self.pick(i, "running")
        if self.status[i] != "running":
            self.step()
            return
        assert Job.objects.complete_many([completion(self.ids[i], self.tokens[i], kind)]) == [
            ClaimTransition.UPDATED
        ]
        self.land(i, kind)
        self.step()

    def complete_stale(self, pick: int, kind: str) -> None:
        """A completion under a token that an expiry, a cancel or a new claim replaced:
        fenced out, whatever it says."""
        i, token = self.stale[pick % len(self.stale)]
        assert Job.objects.complete_many([completion(self.ids[i], token, kind)]) == [
            ClaimTransition.LOST
        ]
        self.step()

    def expire(self, i: int) -> int | None:
        """Age a running member's lease on the database and sweep: the member it took
        back (now ``pending``, or ``dead`` once its attempts are used), or None.
        The caller says what a death does beyond the member, then steps."""
        i = self.pick(i, "running")
        if self.status[i] != "running":
            return None
        Job.objects.filter(pk=self.ids[i]).update(
            lease_expires_at=F("locked_at") - timedelta(days=1)
        )
        assert Job.objects.sweep_expired_leases(10) == 1
        self.stale.append((i, self.tokens.pop(i)))
        self.status[i] = "dead" if self.attempts[i] >= MAX_ATTEMPTS else "pending"
        return i

    def cancel_one(self, i: int, live: tuple[str, ...]) -> int | None:
        """An operator's ``Job.objects.cancel`` of a member: the one cancelled, or None
        (it was not live: nothing changed). The caller adds the consequences, then steps."""
        i = self.pick(i, *live)
        rows = Job.objects.cancel(self.ids[i])
        if self.status[i] not in live:
            assert rows == 0
            return None
        assert rows == 1
        if self.status[i] == "running":
            self.stale.append((i, self.tokens.pop(i)))
        self.status[i] = "cancelled"
        return i

    def requeue_one(self, i: int) -> int | None:
        """``requeue_dead`` of a member: the one requeued (a new life), or None."""
        i = self.pick(i, "dead")
        rows = Job.objects.requeue_dead(self.ids[i])
        if self.status[i] != "dead":
            assert rows == 0
            return None
        assert rows == 1
        self.status[i] = "pending"
        self.attempts[i] = 0
        return i

    def cancel_all_live(self, live: tuple[str, ...]) -> None:
        """The model's side of cancelling the whole group: every live member is cancelled."""
        for i, state in enumerate(self.status):
            if state in live:
                if state == "running":
                    self.stale.append((i, self.tokens.pop(i)))
                self.status[i] = "cancelled"

    def statuses_agree(self) -> None:
        rows = dict(Job.objects.filter(id__in=self.ids).values_list("id", "status"))
        assert [rows[job_id] for job_id in self.ids] == self.status
