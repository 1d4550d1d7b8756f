"""The admin pages render from the wheel's templates, with its stylesheet found."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.contrib.staticfiles import finders
from django.test import Client


@pytest.fixture
def admin_client() -> Client:
    user, _ = User.objects.get_or_create(
        username="smoke", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    "url",
    [
        "/admin/django_arcature/job/",
        "/admin/django_arcature/job/dashboard/",
        "/admin/django_arcature/deadjob/",
        "/admin/django_arcature/schedule/",
        "/admin/django_arcature/queuestate/",
    ],
)
def test_admin_page_renders(admin_client: Client, url: str) -> None:
    response = admin_client.get(url)
    assert response.status_code == 200, response.content[:500]


def test_a_job_page_renders(admin_client: Client) -> None:
    from smoke_app.jobs import greet

    job = greet.enqueue("page")
    response = admin_client.get(f"/admin/django_arcature/job/{job.pk}/change/")
    assert response.status_code == 200
    assert b"smoke_app.greet" in response.content or b"greet" in response.content


def test_the_admin_stylesheet_is_found() -> None:
    assert finders.find("django_arcature/admin.css")
