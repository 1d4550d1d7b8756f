"""``Job.objects.prune(older_than=...)`` takes the ages ``RETENTION`` and
``arcature_prune --older-than`` take, within the same bounds.

Found following docs/howto/deploy.md ("Clean up finished jobs"): ``older_than="14d"``
or ``older_than=86400`` raised ``TypeError`` although the settings take both, and a
negative ``timedelta`` (``timedelta(days=-14)``, "fourteen days ago") deleted every
finished job, including the ones finished a moment before; ``timedelta.max`` raised
``DataError`` on PostgreSQL and deleted nothing elsewhere.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from django_arcature.db import DatabaseNow
from django_arcature.models import Job, JobStatus

pytestmark = pytest.mark.django_db


def finished(n: int, age: timedelta) -> set[uuid.UUID]:
    jobs = Job.objects.enqueue_many("tests.noop", [() for _ in range(n)])
    ids = {job.pk for job in jobs}
    Job.objects.filter(pk__in=ids).update(
        status=JobStatus.SUCCEEDED, finished_at=DatabaseNow(-age.total_seconds()), unique_key=None
    )
    return ids


def remaining() -> set[uuid.UUID]:
    return set(Job.objects.values_list("id", flat=True))


def test_older_than_takes_the_settings_durations() -> None:
    old = finished(3, timedelta(days=20))
    recent = finished(2, timedelta(hours=1))
    assert Job.objects.prune(older_than="14d") == 3
    assert remaining() == recent
    older = finished(1, timedelta(days=3))
    assert Job.objects.prune(older_than=2 * 86400) == 1  # seconds, as in RETENTION
    assert Job.objects.prune(older_than=2.5 * 86400) == 0
    assert remaining() == recent
    assert not (old | older) & remaining()


@pytest.mark.parametrize(
    ("age", "says"),
    [
        (timedelta(days=-14), "zero or more seconds"),
        (-1, "zero or more seconds"),
        (timedelta.max, "at most 100 years"),
        ("fortnight", "is not a duration"),
    ],
)
def test_an_age_out_of_bounds_is_refused_and_deletes_nothing(age: object, says: str) -> None:
    kept = finished(2, timedelta(minutes=5)) | finished(2, timedelta(days=400))
    with pytest.raises(ValueError, match=says):
        Job.objects.prune(older_than=age)  # type: ignore[arg-type]
    assert remaining() == kept


@pytest.mark.parametrize("age", [None, True, [7]])
def test_a_value_of_another_type_is_a_type_error(age: object) -> None:
    with pytest.raises(TypeError, match="older_than must be a timedelta, seconds or a duration"):
        Job.objects.prune(older_than=age)  # type: ignore[arg-type]
