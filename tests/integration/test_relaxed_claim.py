"""The PostgreSQL claim's asynchronous commit (django_arcature.db.relaxed_claim).

What matters is not that the commit is faster (no timed assertion here) but that
the relaxation applies to the claim's own transaction and nothing else, and that
a claim the server loses leaves a job the queue can run again with the stale
worker fenced out. A real server crash cannot be timed to land inside the WAL
writer's window, so the lost claim is made the way a crash leaves it: the claim
statement ran (relaxed) and its transaction never became durable, i.e. rolled
back.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext, override_settings

from django_arcature.db.claimed import ClaimedJob
from django_arcature.db.relaxed_claim import RELAX_COMMIT_FROM
from django_arcature.db.single_statement import claim_with_cte
from django_arcature.models import Job, JobStatus
from django_arcature.transitions import ClaimTransition

from .conftest import MakeJobs, claim_one, fresh

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.only_on("postgresql", reason="synchronous_commit is PostgreSQL's"),
]


def synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return str(cursor.fetchone()[0])


def claim_sql(worker: str = "w1") -> list[str]:
    """The SQL of one claim of one job (which the test enqueued)."""
    with CaptureQueriesContext(connection) as captured:
        claim_one(worker)
    return [query["sql"] for query in captured.captured_queries if "RETURNING" in query["sql"]]


def relaxed_claim_statement(lease: int = 60) -> list[ClaimedJob]:
    """The PostgreSQL claim statement with the relaxation, run in the current transaction."""
    from django_arcature.db.postgresql import PostgreSQLDriver

    driver = PostgreSQLDriver("default")
    return claim_with_cte(
        connection,
        Job._meta.db_table,
        "lost",
        lease,
        1,
        None,
        token_sql="gen_random_uuid()",
        lock="FOR UPDATE SKIP LOCKED",
        materialized="MATERIALIZED",
        now=driver.now_sql(),
        expires=driver.now_sql(lease),
        recheck=False,
        also_from=RELAX_COMMIT_FROM,
    )


def test_an_autocommit_claim_relaxes_its_commit_and_nothing_after_it(
    make_jobs: MakeJobs,
) -> None:
    server_default = synchronous_commit()
    assert server_default != "off", "the test server already commits asynchronously"
    make_jobs(1)
    (sql,) = claim_sql()
    assert "set_config('synchronous_commit', 'off', true)" in sql
    # Local to the claim's transaction: the connection's next one (behind PgBouncer,
    # perhaps another client's) commits as the server says.
    assert synchronous_commit() == server_default


def test_the_claim_statement_turns_off_synchronous_commit_for_its_own_transaction(
    make_jobs: MakeJobs,
) -> None:
    """The subquery is evaluated, not planned away: inside the claim's transaction the
    setting reads ``off`` after the statement, and it is gone once that transaction ends."""
    server_default = synchronous_commit()
    (job_id,) = make_jobs(1)
    with transaction.atomic():
        claimed = relaxed_claim_statement()
        assert [job.id for job in claimed] == [job_id]
        assert synchronous_commit() == "off"
    assert synchronous_commit() == server_default
    assert fresh(job_id).status == JobStatus.RUNNING


def test_an_empty_claim_still_claims_nothing_with_the_relaxation(make_jobs: MakeJobs) -> None:
    assert Job.objects.claim("w1", lease=60, batch=5) == []
    (job_id,) = make_jobs(1)
    assert [job.id for job in Job.objects.claim("w1", lease=60, batch=5)] == [job_id]


@override_settings(ARCATURE={"DURABLE_CLAIMS": True})
def test_durable_claims_keep_the_synchronous_commit(make_jobs: MakeJobs) -> None:
    make_jobs(1)
    (sql,) = claim_sql()
    assert "synchronous_commit" not in sql


def test_a_claim_inside_a_callers_transaction_is_not_relaxed(make_jobs: MakeJobs) -> None:
    """Relaxing there would make the caller's other writes asynchronous too."""
    make_jobs(1)
    with transaction.atomic():
        (sql,) = claim_sql()
        assert synchronous_commit() != "off"
    assert "synchronous_commit" not in sql


def test_a_claim_the_server_lost_is_claimed_again_and_its_worker_is_fenced_out(
    make_jobs: MakeJobs,
) -> None:
    """The crash that matters: a relaxed claim ran, its worker got the job and its
    token, and the server lost the transaction. The job is pending as before the
    claim, the next claim takes it with a fresh token, and every write the first
    worker makes with the lost token (completion, heartbeat) changes zero rows."""
    (job_id,) = make_jobs(1)
    before = fresh(job_id)
    with transaction.atomic():
        (lost,) = relaxed_claim_statement()
        lost_token = lost.claim_token
        # The server crashed before the claim's WAL reached the disk.
        transaction.set_rollback(True)
    after_crash = fresh(job_id)
    assert after_crash.status == JobStatus.PENDING
    assert after_crash.attempts == before.attempts
    assert after_crash.claim_token is None

    assert Job.objects.mark_succeeded(job_id, lost_token, result="stale") is ClaimTransition.LOST
    assert Job.objects.heartbeat(job_id, lost_token, lease=60) is False
    assert fresh(job_id).status == JobStatus.PENDING, "a lost claim's write touched the row"

    again = claim_one("w2")
    assert again.id == job_id
    assert again.claim_token != lost_token
    assert Job.objects.mark_succeeded(job_id, lost_token, result="stale") is ClaimTransition.LOST
    assert Job.objects.heartbeat(job_id, lost_token, lease=60) is False
    owned = fresh(job_id)
    assert (owned.status, owned.claim_token, owned.result) == (
        JobStatus.RUNNING,
        again.claim_token,
        None,
    )
    assert Job.objects.mark_succeeded(job_id, again.claim_token, result="ok") is (
        ClaimTransition.UPDATED
    )
