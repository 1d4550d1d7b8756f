"""A stateful model of batches: members driven through the manager, checked every step.

Hypothesis opens a batch (closed at once or left open), then writes programs of
members added later in their own transactions, closes, claims, fenced completions
(succeeded, dead, retry) under the current or a stale token, snoozes, leases aged
on the database and swept, operator cancels of members, requeues of dead ones and
a cancel of the whole batch. After every step: each member's status, the counts
read from the shard rows (never the members), the batch row's ``outcome``, and how
many times each callback was enqueued (at most once; ``on_success`` only if no
member died or was cancelled) must be the in-memory model's. The steps a workflow
node shares with a batch member are in ``member_programs.py``.

Profiles: ``tests/properties/conftest.py`` (``ARCATURE_SOAK=1`` for the long run).
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import transaction
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from django_arcature import Batch
from django_arcature.models import Job
from django_arcature.workflows.models import BatchRun
from tests.properties.conftest import PROFILE, TALLY
from tests.properties.member_programs import MAX_ATTEMPTS, MemberMachine
from tests.testapp import workflow_jobs as wf

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.django_db(transaction=True)]

TALLY_NAME = "batch model"
LIVE = ("pending", "running")


class BatchModel(MemberMachine):
    TALLY_NAME = TALLY_NAME

    @initialize(n=st.integers(1, 4), close=st.booleans())
    def open_batch(self, n: int, close: bool) -> None:
        Job.objects.all().delete()
        self.batch = Batch(on_success=wf.batch_done, on_finish=wf.batch_record)
        ids = [self.batch.add(wf.step.using(max_attempts=MAX_ATTEMPTS), str(i)) for i in range(n)]
        self.batch.enqueue(close=close)
        self.start(ids, ["pending"] * n)
        self.closed = close
        self.cancelled = False
        self.fired: tuple[bool, bool] | None = None  # (on_success, on_finish) once fired
        self.outcome = ""
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

    def land(self, i: int, kind: str) -> None:
        del self.tokens[i]
        self.status[i] = "pending" if kind == "retry" else kind
        self.maybe_fire()

    # --- rules (claim and snooze: MemberMachine) ----------------------------------------

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

    @rule(i=st.integers(0, 9), kind=st.sampled_from(["succeeded", "succeeded", "dead", "retry"]))
    def complete(self, i: int, kind: str) -> None:
        self.complete_at(i, kind)

    @precondition(lambda self: bool(self.stale))
    @rule(pick=st.integers(0, 20), kind=st.sampled_from(["succeeded", "dead", "retry"]))
    def complete_with_a_stale_token(self, pick: int, kind: str) -> None:
        self.complete_stale(pick, kind)

    @rule(i=st.integers(0, 9))
    def expire_and_sweep(self, i: int) -> None:
        if self.expire(i) is not None:
            self.maybe_fire()
        self.step()

    @precondition(lambda self: self.steps % 4 == 3)
    @rule(i=st.integers(0, 9))
    def cancel_member(self, i: int) -> None:
        if self.cancel_one(i, LIVE) is not None:
            self.maybe_fire()
        self.step()

    @rule(i=st.integers(0, 9))
    def requeue(self, i: int) -> None:
        self.requeue_one(i)
        self.step()

    @precondition(lambda self: self.steps >= 20 and not self.cancelled)
    @rule()
    def cancel_batch(self) -> None:
        self.batch.cancel()
        self.cancelled = True
        self.closed = True
        if self.fired is None:
            self.outcome = "cancelled"
        self.cancel_all_live(LIVE)
        self.step()

    # --- checks ------------------------------------------------------------------------

    @invariant()
    def rows_agree_with_the_model(self) -> None:
        if not hasattr(self, "ids"):
            return
        self.statuses_agree()
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


def test_batches_behave_like_their_model() -> None:
    """Random programs on one batch agree with the model after every step."""
    from hypothesis.stateful import run_state_machine_as_test

    before = Counter(TALLY.get(TALLY_NAME, Counter()))
    # CI: 25 programs per database (about 1.5 s each on SQLite, more on the servers),
    # new ones every run (the profile is not derandomized) on each of the three
    # databases; ``make soak`` (ARCATURE_SOAK=1) runs the soak profile's 400.
    chosen = settings() if PROFILE == "soak" else settings(max_examples=25)
    run_state_machine_as_test(BatchModel, settings=chosen)
    after = TALLY[TALLY_NAME]
    assert after["examples"] > before["examples"]
    assert after["steps"] > before["steps"]
