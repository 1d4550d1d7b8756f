"""The admin's text search looks at the newest rows of the list; ids and dates reach the rest.

``ADMIN_SEARCH_WINDOW`` bounds what a search that matches nothing costs on a big
table (admin/search.py). What an operator must still be able to do: find any job
by its id, reach an old job's text through the date hierarchy or a filter, and
be told when a search was cut.
"""

from __future__ import annotations

import datetime
import uuid

import pytest
from django.test import Client, override_settings
from django.urls import reverse

from django_arcature.models import Job

from .test_admin_support import enqueue, make_dead

pytestmark = pytest.mark.django_db

JOBS = "admin:django_arcature_job_changelist"
DEAD = "admin:django_arcature_deadjob_changelist"
OLD = datetime.datetime(2020, 3, 4, 12, 0, tzinfo=datetime.UTC)
NOTE = b"This search looked at the newest 5 rows of this list only"


@pytest.fixture
def old_dead_job() -> uuid.UUID:
    """A job that died in 2020 with a distinctive message, under 20 newer jobs."""
    [job_id] = make_dead(1, message="needle in the haystack")
    Job.objects.filter(pk=job_id).update(created_at=OLD, finished_at=OLD)
    enqueue(20)
    make_dead(3)
    return job_id


def listed(client: Client, url: str, **params: str) -> tuple[list[uuid.UUID], bytes]:
    response = client.get(reverse(url), params)
    assert response.status_code == 200
    return [job.pk for job in response.context["cl"].result_list], response.content


@override_settings(ARCATURE={"ADMIN_SEARCH_WINDOW": 5})
def test_a_search_looks_at_the_newest_rows_and_says_so(
    admin_client: Client, old_dead_job: uuid.UUID
) -> None:
    found, page = listed(admin_client, JOBS, q="needle")
    assert found == []
    assert NOTE in page
    # A term the newest rows carry is found there.
    found, page = listed(admin_client, JOBS, q="tests.add")
    assert len(found) == 5
    assert NOTE in page


@override_settings(ARCATURE={"ADMIN_SEARCH_WINDOW": 5})
def test_a_date_or_a_filter_moves_the_window_onto_older_rows(
    admin_client: Client, old_dead_job: uuid.UUID
) -> None:
    found, page = listed(admin_client, JOBS, q="needle", created_at__year="2020")
    assert found == [old_dead_job]
    assert NOTE not in page  # the year holds fewer rows than the window
    found, _ = listed(admin_client, JOBS, q="needle", status__exact="dead")
    assert found == [old_dead_job]  # four dead jobs: all within the window
    found, _ = listed(admin_client, DEAD, q="needle")
    assert found == [old_dead_job]


@override_settings(ARCATURE={"ADMIN_SEARCH_WINDOW": 5})
def test_a_job_id_is_found_whatever_its_age(admin_client: Client, old_dead_job: uuid.UUID) -> None:
    found, page = listed(admin_client, JOBS, q=str(old_dead_job))
    assert found == [old_dead_job]
    assert NOTE not in page


@override_settings(ARCATURE={"ADMIN_SEARCH_WINDOW": None})
def test_without_a_window_a_search_reads_every_row(
    admin_client: Client, old_dead_job: uuid.UUID
) -> None:
    found, page = listed(admin_client, JOBS, q="needle")
    assert found == [old_dead_job]
    assert b"This search looked at" not in page


def test_the_default_window_leaves_a_small_table_whole(
    admin_client: Client, old_dead_job: uuid.UUID
) -> None:
    found, page = listed(admin_client, JOBS, q="needle")
    assert found == [old_dead_job]
    assert b"This search looked at" not in page
