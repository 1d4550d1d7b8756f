"""Claims of different shapes, one after the other in one process, each get their own SQL.

The one-statement claim (PostgreSQL, SQLite) keeps its SQL text per shape
(``db/single_statement.py``): how many queues and excluded queues it names, its lease,
whether it runs inside a transaction. A shape that reused another's text would claim
from the wrong queues, stamp the wrong lease, or bind too few or too many parameters:
each claim here would then take the wrong jobs or fail. MariaDB's claim keeps its own
statements per shape; the same claims must hold there too.
"""

from __future__ import annotations

import pytest
from django.db import transaction

from django_arcature.models import Job, JobStatus

from .conftest import MakeJobs, fresh

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_queue_count_and_exclusion_claims_only_its_own_jobs(make_jobs: MakeJobs) -> None:
    (a,) = make_jobs(1, queue="a")
    (b,) = make_jobs(1, queue="b")
    (c,) = make_jobs(1, queue="c")
    # One queue, then two, then all but two: every claim after the first has a new shape.
    assert [job.id for job in Job.objects.claim("w1", lease=60, batch=5, queues=["b"])] == [b]
    assert Job.objects.claim("w1", lease=60, batch=5, queues=["b", "x"]) == []
    assert Job.objects.claim("w1", lease=60, batch=5, exclude=["a", "c"]) == []
    taken = Job.objects.claim("w1", lease=60, batch=5, queues=["a", "c"], exclude=["c"])
    assert [job.id for job in taken] == [a]
    # And the first shape again, whose text was kept: still only its own queue.
    assert Job.objects.claim("w1", lease=60, batch=5, queues=["b"]) == []
    assert [job.id for job in Job.objects.claim("w1", lease=60, batch=5)] == [c]
    assert {fresh(job_id).status for job_id in (a, b, c)} == {JobStatus.RUNNING}


def test_each_lease_is_stamped_as_asked(make_jobs: MakeJobs) -> None:
    make_jobs(2)
    for lease in (30, 3600):
        (claimed,) = Job.objects.claim("w1", lease=lease, batch=1)
        assert claimed.lease_seconds == lease
        row = fresh(claimed.id)
        assert row.lease_seconds == lease
        assert row.lease_expires_at is not None
        assert row.locked_at is not None
        held = (row.lease_expires_at - row.locked_at).total_seconds()
        assert lease - 1 <= held <= lease + 1


def test_a_claim_inside_a_transaction_and_one_outside_each_commit_as_they_should(
    make_jobs: MakeJobs,
) -> None:
    both = set(make_jobs(2))
    with transaction.atomic():
        (inside,) = Job.objects.claim("w1", lease=60, batch=1)
        transaction.set_rollback(True)  # the caller's transaction decides: nothing claimed
    assert inside.id in both
    assert fresh(inside.id).status == JobStatus.PENDING
    taken = Job.objects.claim("w1", lease=60, batch=2)
    assert {job.id for job in taken} == both
    assert {fresh(job_id).claim_token for job_id in both} == {job.claim_token for job in taken}
