"""``jobs_claimed`` is sent only for a claim that committed (issue 19, B13).

A limited queue's claim runs inside the gate's own transaction (lock the
queue's row, count, claim, record the starts). The signal used to be sent from
inside it, so a claim whose transaction then rolled back had already been
counted by metrics, and the Prometheus per-attempt map kept an entry for a
claim token that never existed.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, transaction

from django_arcature import signals
from django_arcature.contrib.prometheus import receivers
from django_arcature.models import Job, JobStatus
from django_arcature.queues import gate as gate_module
from django_arcature.queues.gate import QueueGate
from django_arcature.queues.limits import QueueLimit

pytestmark = pytest.mark.django_db(transaction=True)


class Recorder:
    def __init__(self) -> None:
        self.tokens: list[Any] = []

    def __call__(self, sender: Any, jobs: Any, **kwargs: Any) -> None:
        self.tokens.extend(job.claim_token for job in jobs)


@pytest.fixture
def claimed() -> Any:
    recorder = Recorder()
    signals.jobs_claimed.connect(recorder, dispatch_uid="test-claim-commit")
    receivers.install()
    before = dict(receivers._attempts)
    yield recorder
    signals.jobs_claimed.disconnect(dispatch_uid="test-claim-commit")
    receivers.uninstall()
    receivers._attempts.clear()
    receivers._attempts.update(before)


def _rated_gate() -> QueueGate:
    return QueueGate(
        "default",
        limits={"rated": QueueLimit(concurrency=5, rate=100, per_seconds=60)},
        refresh_seconds=0,
    )


def test_a_limited_claim_that_rolls_back_sends_no_signal_and_leaves_no_metric(
    claimed: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim's own transaction fails after the rows were taken (recording the
    starts fails): nothing was claimed, so nothing may be reported."""
    Job.objects.enqueue_many("tests.noop", [(), ()], queue="rated")

    def failing_save(using: str, name: str, starts: list[Any]) -> None:
        raise DatabaseError("recording the starts failed")

    monkeypatch.setattr(gate_module, "_save_starts", failing_save)
    with pytest.raises(DatabaseError):
        _rated_gate().claim(Job.objects, "w1", 60, 5)
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 0
    assert claimed.tokens == []
    assert receivers._attempts == {}
    monkeypatch.undo()
    jobs = _rated_gate().claim(Job.objects, "w1", 60, 5)
    assert len(jobs) == 2
    assert sorted(map(str, claimed.tokens)) == sorted(str(job.claim_token) for job in jobs)
    assert set(receivers._attempts) == {(job.id, job.claim_token) for job in jobs}


def test_a_claim_inside_an_outer_transaction_is_reported_when_that_commits(
    claimed: Recorder,
) -> None:
    Job.objects.enqueue_many("tests.noop", [(), ()], queue="rated")
    taken: list[Any] = []

    def claim_then_fail() -> None:
        with transaction.atomic():
            taken.extend(_rated_gate().claim(Job.objects, "w1", 60, 5))
            raise RuntimeError("the caller's transaction rolls back")

    with pytest.raises(RuntimeError):
        claim_then_fail()
    assert len(taken) == 2
    assert claimed.tokens == []
    assert receivers._attempts == {}
    with transaction.atomic():
        jobs = _rated_gate().claim(Job.objects, "w1", 60, 5)
        assert claimed.tokens == []  # not yet: the claim has not committed
    assert len(claimed.tokens) == len(jobs) == 2
