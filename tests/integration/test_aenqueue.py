"""``await handle.aenqueue()`` and the django.tasks backend's ``aenqueue``, on every database.

From async code the job is inserted in autocommit: on PostgreSQL on the event
loop's own psycopg connection (not through a worker thread), elsewhere through
the sync path in a thread. Either way the row must be the one ``enqueue()``
writes, committed (another connection sees it) before the await returns, with
the same unique-key, validation and announcement rules.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import OperationalError, connection, connections, transaction
from django.http import HttpRequest, JsonResponse
from django.test import AsyncClient, override_settings
from django.urls import path

from django_arcature import MalformedPayload, job
from django_arcature.db import async_pg
from django_arcature.models import Job, JobStatus
from tests.integration import backend_tasks as tasks

pytestmark = pytest.mark.django_db(transaction=True)

ON_POSTGRES = connection.vendor == "postgresql"


@job(name="aenqueue_tests.echo", queue="echoes", priority=3, max_attempts=5)
def echo(*args: Any, **kwargs: Any) -> None:
    """Takes any JSON."""


@job(name="aenqueue_tests.once", unique=True)
def once(key: str) -> None:
    """One live job per key."""


def _native_here() -> bool:
    """Whether this event loop holds an open connection of its own for the alias."""
    kept = async_pg._by_loop.get(asyncio.get_running_loop(), {}).get("default")
    return kept is not None and not kept[0].closed


async def enqueue_view(request: HttpRequest) -> JsonResponse:
    """An ASGI view without a transaction: enqueue, say how it went."""
    found = await echo.aenqueue(request.GET["value"], n=1)
    return JsonResponse({"id": str(found.id), "native": _native_here()})


urlpatterns = [path("enqueue", enqueue_view)]


def run(coroutine_function: Any, *args: Any, **kwargs: Any) -> Any:
    """Run in an event loop of its own with no sync caller waiting on it (as an ASGI
    server runs a request), closing the loop's connections after."""

    async def inside() -> Any:
        try:
            return await coroutine_function(*args, **kwargs)
        finally:
            await async_pg.aclose_all()
            # The thread sync_to_async used (the ASGI handler's signals, a fallback)
            # has a connection of its own.
            await sync_to_async(connections.close_all)()

    return asyncio.run(inside())


@override_settings(ROOT_URLCONF=__name__)
def test_an_async_view_commits_the_job_before_it_responds() -> None:
    response = run(AsyncClient().get, "/enqueue", {"value": "héllo\t\\"})
    body = json.loads(response.content)
    stored = Job.objects.get(pk=body["id"])  # this connection sees it: committed
    assert (stored.task_name, stored.queue, stored.priority, stored.max_attempts) == (
        "aenqueue_tests.echo",
        "echoes",
        3,
        5,
    )
    assert stored.status == JobStatus.PENDING
    assert stored.payload == {"args": ["héllo\t\\"], "kwargs": {"n": 1}}
    assert body["native"] is ON_POSTGRES


def test_the_returned_job_is_the_stored_row_and_matches_the_sync_path() -> None:
    made = run(echo.aenqueue, [1, 2.5, None], key={"x": "é"})
    twin = echo.enqueue([1, 2.5, None], key={"x": "é"})
    stored = Job.objects.get(pk=made.pk)
    assert not made._state.adding
    assert made._state.db == "default"
    assert made.available_at == stored.available_at
    assert made.created_at == stored.created_at
    skip = {"id", "available_at", "created_at"}
    fields = [f.attname for f in Job._meta.concrete_fields if f.attname not in skip]
    assert [getattr(stored, name) for name in fields] == [
        getattr(Job.objects.get(pk=twin.pk), name) for name in fields
    ]


def test_a_unique_key_already_held_returns_the_holder_and_announces_once(
    announced: list[Job],
) -> None:
    async def twice() -> tuple[Job, Job]:
        return await once.aenqueue("k1"), await once.aenqueue("k1")

    first, second = run(twice)
    assert first.pk == second.pk
    assert Job.objects.filter(unique_key=first.unique_key).count() == 1
    assert [seen.pk for seen in announced] == [first.pk]


def test_a_key_held_by_a_sync_enqueue_is_found_from_async_code() -> None:
    holder = once.enqueue("k2")
    assert run(once.aenqueue, "k2").pk == holder.pk
    assert Job.objects.count() == 1


def test_a_huge_payload_is_refused_with_a_clear_error_and_nothing_is_written(
    announced: list[Job],
) -> None:
    with pytest.raises(MalformedPayload, match=r"over the limit of \d+ bytes"):
        run(echo.aenqueue, "x" * (2 << 20))
    with pytest.raises(MalformedPayload):
        run(echo.aenqueue, object())
    assert Job.objects.count() == 0
    assert announced == []


def test_the_tasks_backends_aenqueue_stores_the_task() -> None:
    result = run(tasks.add.aenqueue, 2, 3)
    stored = Job.objects.get(pk=result.id)
    assert (stored.task_name, stored.backend) == ("tests.integration.backend_tasks.add", "default")
    assert stored.payload["args"] == [2, 3]
    assert result.enqueued_at == stored.created_at


@pytest.mark.only_on("postgresql", reason="the loop's own connection is PostgreSQL's")
@pytest.mark.pgbouncer(False, reason="terminates a server connection directly")
def test_a_lost_async_connection_fails_one_enqueue_and_the_next_reconnects() -> None:
    async def scenario() -> tuple[str, Job]:
        await echo.aenqueue("first")
        own = await async_pg.async_connection("default")
        pid = own.info.backend_pid

        def terminate() -> None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])

        await sync_to_async(terminate)()
        try:
            await echo.aenqueue("lost")
            outcome = "succeeded"
        except OperationalError:
            outcome = "failed"
        return outcome, await echo.aenqueue("after")

    outcome, after = run(scenario)
    assert outcome == "failed"  # a lost acknowledgement is reported, never retried blindly
    assert Job.objects.filter(pk=after.pk).exists()
    assert sorted(j.payload["args"][0] for j in Job.objects.all()) == ["after", "first"]


@pytest.mark.only_on("postgresql", reason="the loop's own connection is PostgreSQL's")
@pytest.mark.pgbouncer(False, reason="prepared statements live in one server session")
def test_a_prepare_threshold_alone_prepares_the_insert_on_the_loops_connection() -> None:
    """``prepare_threshold`` without ``server_side_binding``: as on the sync path, the
    INSERT goes through a server-binding cursor, which psycopg prepares, and the rows
    are the ones ``enqueue()`` writes."""
    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)

    async def scenario() -> tuple[list[Job], list[str]]:
        jobs = [await echo.aenqueue("prepared", n=index) for index in range(3)]
        own = await async_pg.async_connection("default")
        cursor = await own.execute(
            "SELECT statement FROM pg_prepared_statements WHERE NOT from_sql"
        )
        return jobs, [statement for (statement,) in await cursor.fetchall()]

    options.update(prepare_threshold=1)
    try:
        jobs, prepared = run(scenario)
    finally:
        options.clear()
        options.update(saved)
    assert [s for s in prepared if s.startswith(f'INSERT INTO "{Job._meta.db_table}"')], prepared
    for index, found in enumerate(jobs):
        stored = Job.objects.get(pk=found.pk)
        assert stored.payload == {"args": ["prepared"], "kwargs": {"n": index}}
        assert (stored.created_at, stored.available_at) == (found.created_at, found.available_at)


def test_called_through_async_to_sync_it_joins_the_callers_transaction() -> None:
    """A sync caller (a test case, a sync view) inside atomic(): the job is written in
    its transaction and rolled back with it, as enqueue() would be."""

    class Abort(Exception):
        pass

    seen: list[bool] = []

    def enqueue_then_fail() -> None:
        with transaction.atomic():
            made = async_to_sync(echo.aenqueue)("inside")
            seen.append(Job.objects.filter(pk=made.pk).exists())  # this transaction sees it
            raise Abort

    with pytest.raises(Abort):
        enqueue_then_fail()
    assert seen == [True]
    assert Job.objects.count() == 0


def test_eager_mode_runs_the_job_through_the_sync_path() -> None:
    with override_settings(ARCATURE={"EAGER": True}):
        made = run(echo.aenqueue, "eager")
    assert Job.objects.get(pk=made.pk).status == JobStatus.SUCCEEDED
