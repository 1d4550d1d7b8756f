"""A stateful model of batches: members driven through the manager, checked every step.

Hypothesis opens a batch (closed at once or left open), then writes programs of
members added later in their own transactions, closes, claims, fenced completions
(succeeded, dead, retry) under the current or a stale token, snoozes, leases aged
on the database and swept, operator cancels of members, requeues of dead ones and
a cancel of the whole batch. After every step: each member's status, the counts
read from the shard rows (never the members), the batch row's ``outcome``, and how
many times each callback was enqueued (at most once; ``on_success`` only if no
member died or was cancelled) must be the in-memory model's.

Profiles: ``tests/properties/conftest.py`` (``ARCATURE_SOAK=1`` for the long run).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from django.db import transaction
from django.db.models import F
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from django_arcature import Batch
from django_arcature.core.decide import HandlerError
from django_arcature.db import ClaimedJob
from django_arcature.models import Job
from django_arcature.transitions import ClaimTransition, Completion
from django_arcature.worker.dispatch import snooze_completion
from django_arcature.workflows.models import BatchRun
from tests.properties.conftest import PROFILE, TALLY
from tests.testapp import workflow_jobs as wf

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.django_db(transaction=True)]

TALLY_NAME = "batch model"
MAX_ATTEMPTS = 2
LIVE = ("pending", "running")
COLUMN = {"succeeded": "succeeded", "dead": "dead", "cancelled": "cancelled"}


class BatchModel(RuleBasedStateMachine):
    @initialize(n=st.integers(1, 4), close=st.booleans())
    def open_batch(self, n: int, close: bool) -> None:
        Job.objects.all().delete()
        self.batch = Batch(on_success=wf.batch_done, on_finish=wf.batch_record)
        self.ids = [
            self.batch.add(wf.step.using(max_attempts=MAX_ATTEMPTS), str(i)) for i in range(n)
        ]
        self.batch.enqueue(close=close)
        self.status = ["pending"] * n
        self.attempts = [0] * n
        self.tokens: dict[int, uuid.UUID] = {}
        self.claims: dict[int, ClaimedJob] = {}
        self.stale: list[tuple[int, uuid.UUID]] = []
        self.closed = close
        self.cancelled = False
        self.fired: tuple[bool, bool] | None = None  # (on_success, on_finish) once fired
        self.outcome = ""
        self.steps = 0
        TALLY.setdefault(TALLY_NAME, Counter())["examples"] += 1
        self.maybe_fire()

    # --- the model ---------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        tally = Counter(self.status)
        done = {name: tally[name] for name in ("succeeded", "dead", "cancelled")}
        return {**done, "total": len(self.ids), "pending": len(self.ids) - sum(done.values())}

    def maybe_fire(self) -> None:
        counts = self.counts()
        if self.fired or not self.closed or self.cancelled or counts["pending"]:
            return
        clean = counts["dead"] == 0 and counts["cancelled"] == 0
        self.fired = (clean, True)
        self.outcome = "succeeded" if clean else "failed"

    def step(self) -> None:
        TALLY[TALLY_NAME]["steps"] += 1
        self.steps += 1

    def pick(self, pick: int, *states: str) -> int:
        eligible = [i for i, state in enumerate(self.status) if state in states]
        return eligible[pick % len(eligible)] if eligible else pick % len(self.ids)

    def land(self, i: int, kind: str) -> None:
        del self.tokens[i]
        self.status[i] = "pending" if kind == "retry" else kind
        self.maybe_fire()

    # --- rules -------------------------------------------------------------------------

    @precondition(lambda self: len(self.ids) < 10)
    @rule(k=st.integers(1, 3), close=st.booleans())
    def add_later(self, k: int, close: bool) -> None:
        """Members added in a transaction of their own, to the batch enqueued before."""
        handle = Batch.open(self.batch.id)  # type: ignore[arg-type]
        new = [handle.add(wf.step.using(max_attempts=MAX_ATTEMPTS), f"late {i}") for i in range(k)]
        if self.closed:
            with pytest.raises(ValueError, match="closed"):
                handle.enqueue(close=close)
            self.step()
            return
        with transaction.atomic():
            handle.enqueue(close=close)
        self.ids.extend(new)
        self.status.extend(["pending"] * k)
        self.attempts.extend([0] * k)
        self.closed = close
        self.maybe_fire()
        self.step()

    @rule()
    def close(self) -> None:
        self.batch.close()
        self.closed = True
        self.maybe_fire()
        self.step()

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

    @rule(i=st.integers(0, 9), kind=st.sampled_from(["succeeded", "succeeded", "dead", "retry"]))
    def complete(self, i: int, kind: str) -> None:
        i = self.pick(i, "running")
        if self.status[i] != "running":
            self.step()
            return
        completion = _completion(self.ids[i], self.tokens[i], kind)
        assert Job.objects.complete_many([completion]) == [ClaimTransition.UPDATED]
        self.land(i, kind)
        self.step()

    @rule(i=st.integers(0, 9), stale=st.booleans())
    def snooze(self, i: int, stale: bool) -> None:
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

    @precondition(lambda self: bool(self.stale))
    @rule(pick=st.integers(0, 20), kind=st.sampled_from(["succeeded", "dead", "retry"]))
    def complete_with_a_stale_token(self, pick: int, kind: str) -> None:
        i, token = self.stale[pick % len(self.stale)]
        assert Job.objects.complete_many([_completion(self.ids[i], token, kind)]) == [
            ClaimTransition.LOST
        ]
        self.step()

    @rule(i=st.integers(0, 9))
    def expire_and_sweep(self, i: int) -> None:
        i = self.pick(i, "running")
        if self.status[i] != "running":
            self.step()
            return
        Job.objects.filter(pk=self.ids[i]).update(
            lease_expires_at=F("locked_at") - timedelta(days=1)
        )
        assert Job.objects.sweep_expired_leases(10) == 1
        self.stale.append((i, self.tokens.pop(i)))
        self.status[i] = "dead" if self.attempts[i] >= MAX_ATTEMPTS else "pending"
        self.maybe_fire()
        self.step()

    @precondition(lambda self: self.steps % 4 == 3)
    @rule(i=st.integers(0, 9))
    def cancel_member(self, i: int) -> None:
        i = self.pick(i, *LIVE)
        rows = Job.objects.cancel(self.ids[i])
        if self.status[i] not in LIVE:
            assert rows == 0
            self.step()
            return
        assert rows == 1
        if self.status[i] == "running":
            self.stale.append((i, self.tokens.pop(i)))
        self.status[i] = "cancelled"
        self.maybe_fire()
        self.step()

    @rule(i=st.integers(0, 9))
    def requeue(self, i: int) -> None:
        i = self.pick(i, "dead")
        rows = Job.objects.requeue_dead(self.ids[i])
        if self.status[i] != "dead":
            assert rows == 0
            self.step()
            return
        assert rows == 1
        self.status[i] = "pending"
        self.attempts[i] = 0
        self.step()

    @precondition(lambda self: self.steps >= 20 and not self.cancelled)
    @rule()
    def cancel_batch(self) -> None:
        self.batch.cancel()
        self.cancelled = True
        self.closed = True
        if self.fired is None:
            self.outcome = "cancelled"
        for i, state in enumerate(self.status):
            if state in LIVE:
                if state == "running":
                    self.stale.append((i, self.tokens.pop(i)))
                self.status[i] = "cancelled"
        self.step()

    # --- checks ------------------------------------------------------------------------

    @invariant()
    def rows_agree_with_the_model(self) -> None:
        if not hasattr(self, "ids"):
            return
        rows = dict(Job.objects.filter(id__in=self.ids).values_list("id", "status"))
        assert [rows[job_id] for job_id in self.ids] == self.status
        assert self.batch.counts() == self.counts()
        assert self.batch.run is not None
        assert BatchRun.objects.get(pk=self.batch.run.pk).outcome == self.outcome

    @invariant()
    def callbacks_fire_once(self) -> None:
        if not hasattr(self, "ids"):
            return
        fired = Counter(
            Job.objects.filter(
                task_name__in=("wf.batch_done", "wf.batch_record"),
                payload__args=[str(self.batch.id)],
            ).values_list("task_name", flat=True)
        )
        on_success, on_finish = self.fired or (False, False)
        assert (
            fired
            == Counter({"wf.batch_done": int(on_success), "wf.batch_record": int(on_finish)})
            - Counter()
        )


def _completion(job_id: uuid.UUID, token: uuid.UUID, kind: str) -> Completion:
    if kind == "succeeded":
        return Completion(job_id, token, "succeeded", result=1)
    if kind == "dead":
        return Completion(job_id, token, "dead", error_kind="permanent", message="no")
    return Completion(job_id, token, "retry", retry_delay=0.0, message="again")


def test_batches_behave_like_their_model() -> None:
    """Random programs on one batch agree with the model after every step."""
    from hypothesis.stateful import run_state_machine_as_test

    before = Counter(TALLY.get(TALLY_NAME, Counter()))
    # Half the CI profile's examples (a batch program is longer to check); all of soak's.
    chosen = settings() if PROFILE == "soak" else settings(max_examples=40)
    run_state_machine_as_test(BatchModel, settings=chosen)
    after = TALLY[TALLY_NAME]
    assert after["examples"] > before["examples"]
    assert after["steps"] > before["steps"]
