"""The database itself refuses every forbidden row, whatever code wrote it.

The manager never writes these values; the point is that nothing else can
either — a raw UPDATE, a careless migration or another program sharing the
table. Each case goes straight to SQL through ``QuerySet.update`` or an
unvalidated ``save(force_insert=True)``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from django_arcature.models import Job, JobStatus

from .conftest import MakeJobs, claim_one

pytestmark = pytest.mark.django_db

Setup = Callable[[MakeJobs], uuid.UUID]


def pending(make_jobs: MakeJobs) -> uuid.UUID:
    return make_jobs(1)[0]


def running(make_jobs: MakeJobs) -> uuid.UUID:
    job_id = make_jobs(1)[0]
    claim_one()
    return job_id


# (name, a job to start from, the forbidden change)
UPDATES: list[tuple[str, Setup, dict[str, Any]]] = [
    ("lease_seconds 0", pending, {"lease_seconds": 0}),
    ("lease_seconds negative", pending, {"lease_seconds": -30}),
    ("attempts -1", pending, {"attempts": -1}),
    ("max_attempts 0", pending, {"max_attempts": 0}),
    ("unknown status", pending, {"status": "paused"}),
    ("empty status", pending, {"status": ""}),
    ("unknown error_kind", pending, {"error_kind": "oops"}),
    ("running without token", pending, {"status": JobStatus.RUNNING}),
    ("token while pending", pending, {"claim_token": uuid.uuid4()}),
    ("token dropped while running", running, {"claim_token": None}),
    ("succeeded keeping its token", running, {"status": JobStatus.SUCCEEDED}),
    ("dead keeping its token", running, {"status": JobStatus.DEAD}),
    ("unique_key on a succeeded job", pending, {"unique_key": "k", "status": "succeeded"}),
    ("unique_key on a dead job", pending, {"unique_key": "k", "status": "dead"}),
    ("unique_key on a cancelled job", pending, {"unique_key": "k", "status": "cancelled"}),
]


@pytest.mark.parametrize(
    ("setup", "change"), [(s, c) for _, s, c in UPDATES], ids=[n for n, _, _ in UPDATES]
)
def test_forbidden_update_is_refused(make_jobs: MakeJobs, setup: Setup, change: Any) -> None:
    job_id = setup(make_jobs)
    before = Job.objects.filter(pk=job_id).values().get()
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=job_id).update(**change)
    assert Job.objects.filter(pk=job_id).values().get() == before


def _row(**fields: Any) -> Job:
    now = timezone.now()
    values: dict[str, Any] = {
        "id": uuid.uuid4(),
        "task_name": "tests.noop",
        "available_at": now,
        "created_at": now,
    }
    values.update(fields)
    return Job(**values)


INSERTS: list[tuple[str, dict[str, Any]]] = [
    ("lease_seconds 0", {"lease_seconds": 0}),
    ("attempts -1", {"attempts": -1}),
    ("max_attempts 0", {"max_attempts": 0}),
    ("unknown status", {"status": "paused"}),
    ("unknown error_kind", {"error_kind": "oops"}),
    ("running without token", {"status": "running"}),
    ("token while pending", {"claim_token": uuid.uuid4()}),
    ("unique_key on a finished job", {"status": "succeeded", "unique_key": "k"}),
]


@pytest.mark.parametrize("fields", [f for _, f in INSERTS], ids=[n for n, _ in INSERTS])
def test_forbidden_insert_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        _row(**fields).save(force_insert=True)
    assert Job.objects.count() == 0


def test_raw_sql_insert_is_refused_too() -> None:
    """No ORM at all: the CHECK constraints live in the schema."""
    table = connection.ops.quote_name(Job._meta.db_table)
    good = _row()
    columns = list(Job._meta.concrete_fields)
    names = ", ".join(connection.ops.quote_name(str(f.column)) for f in columns)
    marks = ", ".join(["%s"] * len(columns))

    def values(job: Job) -> list[Any]:
        return [f.get_db_prep_save(getattr(job, f.attname), connection) for f in columns]

    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", values(good))
        bad = _row(lease_seconds=0)
        with pytest.raises(IntegrityError), transaction.atomic():
            cursor.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", values(bad))
    assert list(Job.objects.values_list("id", flat=True)) == [good.id]


def test_two_active_jobs_cannot_share_a_unique_key() -> None:
    _row(unique_key="nightly").save(force_insert=True)
    with pytest.raises(IntegrityError), transaction.atomic():
        _row(unique_key="nightly").save(force_insert=True)
    running_holder = _row(unique_key="weekly", status="running", claim_token=uuid.uuid4())
    running_holder.save(force_insert=True)
    with pytest.raises(IntegrityError), transaction.atomic():
        _row(unique_key="weekly").save(force_insert=True)
    first, other = Job.objects.filter(unique_key="nightly").get(), _row()
    other.save(force_insert=True)
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=other.pk).update(unique_key="nightly")
    assert Job.objects.filter(unique_key="nightly").get() == first


def test_valid_rows_are_accepted() -> None:
    """The constraints forbid the bad values only: the good neighbours all go in."""
    _row(lease_seconds=1, attempts=0, max_attempts=1).save(force_insert=True)
    _row(status="running", claim_token=uuid.uuid4()).save(force_insert=True)
    _row(status="dead", error_kind="exhausted").save(force_insert=True)
    _row(status="succeeded").save(force_insert=True)
    _row(status="pending", unique_key="a").save(force_insert=True)
    _row(status="running", unique_key="b", claim_token=uuid.uuid4()).save(force_insert=True)
    _row(unique_key=None).save(force_insert=True)
    _row(unique_key=None).save(force_insert=True)  # NULL keys never collide
    assert Job.objects.count() == 8
