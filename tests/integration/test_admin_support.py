"""Jobs in every state for the admin tests, made only through the manager (no tests here).

Each helper enqueues into its own queue and claims only from that queue, so the
jobs it finishes are exactly the ones it created.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import Permission, User
from django.test import Client

from django_arcature.models import ErrorKind, Job


def enqueue(
    n: int, queue: str = "default", task: str = "tests.add", **options: Any
) -> list[uuid.UUID]:
    arguments = [(i, 1) for i in range(n)] if task == "tests.add" else [() for _ in range(n)]
    return [job.id for job in Job.objects.enqueue_many(task, arguments, queue=queue, **options)]


def claimed(queue: str, n: int, worker: str = "worker-a") -> list[tuple[uuid.UUID, uuid.UUID]]:
    jobs = Job.objects.claim(worker, lease=60, batch=n, queues=[queue])
    assert len(jobs) == n, f"claimed {len(jobs)} of {n} from {queue!r}"
    return [(job.id, job.claim_token) for job in jobs]


TRACEBACK = 'Traceback (most recent call last):\n  File "jobs.py", line 3\nRuntimeError: no'


def make_dead(
    n: int,
    queue: str = "dead-q",
    kind: str = ErrorKind.PERMANENT,
    message: str = "the mail server said no",
    worker: str = "worker-a",
) -> list[uuid.UUID]:
    enqueue(n, queue)
    ids = []
    for job_id, token in claimed(queue, n, worker):
        Job.objects.mark_dead(
            job_id,
            token,
            kind,
            message,
            traceback=TRACEBACK,
        )
        ids.append(job_id)
    return ids


def make_succeeded(n: int, queue: str = "done-q", worker: str = "worker-a") -> list[uuid.UUID]:
    enqueue(n, queue)
    ids = []
    for job_id, token in claimed(queue, n, worker):
        Job.objects.mark_succeeded(job_id, token, result={"sum": 2, "note": "ok"})
        ids.append(job_id)
    return ids


def make_running(n: int, queue: str = "run-q", worker: str = "worker-b") -> list[uuid.UUID]:
    enqueue(n, queue)
    return [job_id for job_id, _ in claimed(queue, n, worker)]


def make_scheduled(n: int, queue: str = "later-q") -> list[uuid.UUID]:
    return enqueue(n, queue, delay=timedelta(hours=2))


def status_of(job_id: uuid.UUID) -> str:
    return Job.objects.get(pk=job_id).status


def staff(username: str, *codenames: str) -> User:
    """A staff user holding exactly ``codenames`` on the job model (no superuser powers)."""
    user = User.objects.create_user(username, password="pw-" + username, is_staff=True)
    permissions = Permission.objects.filter(
        content_type__app_label="django_arcature", codename__in=codenames
    )
    assert permissions.count() == len(codenames), codenames
    user.user_permissions.add(*permissions)
    return user


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []
