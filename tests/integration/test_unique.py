"""Unique jobs: at most one pending or running job per key, decided by the database.

The race test is the one that matters: many threads, each on its own
connection, enqueue the same key at the same instant. A check-then-insert
would let several through; the unique constraint lets exactly one.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
from django.db import connections, transaction

from django_arcature.models import Job, JobStatus
from django_arcature.testing import run_job
from tests.integration.api_jobs import add, unique_sync

pytestmark = pytest.mark.django_db


def test_a_duplicate_enqueue_returns_the_live_job() -> None:
    first = add.using(unique_key="report:7").enqueue(7)
    second = add.using(unique_key="report:7").enqueue(7)
    assert second.pk == first.pk
    assert Job.objects.filter(unique_key="report:7").count() == 1


def test_the_duplicate_is_returned_even_with_other_arguments() -> None:
    """An explicit key is the caller's promise that the calls are the same job."""
    first = add.using(unique_key="nightly").enqueue(1)
    second = add.using(unique_key="nightly").enqueue(2)
    assert second.pk == first.pk
    assert Job.objects.get().payload == {"args": [1], "kwargs": {}}


def test_unique_true_derives_the_key_from_the_call_however_it_is_spelled() -> None:
    a = unique_sync.enqueue(5)
    b = unique_sync.enqueue(account_id=5)
    c = unique_sync.enqueue(5, full=False)  # the default, spelled out
    d = unique_sync.enqueue(5, full=True)
    e = unique_sync.enqueue(6)
    assert a.pk == b.pk == c.pk
    assert len({a.pk, d.pk, e.pk}) == 3
    assert a.unique_key is not None
    assert a.unique_key.startswith("api.unique_sync:")
    assert Job.objects.count() == 3


def test_an_explicit_key_overrides_the_derived_one() -> None:
    a = unique_sync.using(unique_key="account-5").enqueue(5)
    b = unique_sync.enqueue(5)
    assert a.unique_key == "account-5"
    assert b.pk != a.pk


@pytest.mark.parametrize("finish", ["succeeded", "dead", "cancelled"])
def test_the_key_is_freed_when_the_job_finishes(finish: str) -> None:
    first = add.using(unique_key="once").enqueue(1)
    if finish == "succeeded":
        assert run_job(first).status == JobStatus.SUCCEEDED
    elif finish == "dead":
        claimed = Job.objects.claim_job(first.pk, "w", 30)
        assert claimed is not None
        Job.objects.mark_dead(claimed.id, claimed.claim_token, "permanent", "gave up")
    else:
        assert Job.objects.cancel(first.pk) == 1
    first.refresh_from_db()
    assert first.status == finish
    assert first.unique_key is None

    second = add.using(unique_key="once").enqueue(1)
    assert second.pk != first.pk
    assert Job.objects.get(pk=second.pk).unique_key == "once"


def test_a_running_job_keeps_its_key() -> None:
    first = add.using(unique_key="busy").enqueue(1)
    claimed = Job.objects.claim("w", lease=30, batch=1)
    assert [c.id for c in claimed] == [first.pk]
    assert add.using(unique_key="busy").enqueue(1).pk == first.pk


def test_a_job_waiting_for_a_retry_keeps_its_key() -> None:
    first = add.using(unique_key="retrying").enqueue(1)
    claimed = Job.objects.claim_job(first.pk, "w", 30)
    assert claimed is not None
    Job.objects.mark_retry(claimed.id, claimed.claim_token, first.available_at, "try again")
    assert Job.objects.get(pk=first.pk).status == JobStatus.PENDING
    assert add.using(unique_key="retrying").enqueue(1).pk == first.pk


def test_a_duplicate_inside_the_callers_transaction_keeps_the_transaction_usable() -> None:
    with transaction.atomic():
        first = add.using(unique_key="tx").enqueue(1)
        again = add.using(unique_key="tx").enqueue(1)  # fails under its own savepoint
        other = add.enqueue(2)  # the transaction goes on
    assert again.pk == first.pk
    assert Job.objects.filter(pk__in=[first.pk, other.pk]).count() == 2


def test_enqueue_many_of_a_unique_job_collapses_duplicates() -> None:
    existing = unique_sync.enqueue(1)
    jobs = unique_sync.enqueue_many([(1,), (2,), {"account_id": 2}, (3,)])
    assert jobs[0].pk == existing.pk
    assert jobs[1].pk == jobs[2].pk
    assert len({j.pk for j in jobs}) == 3
    assert Job.objects.count() == 3


# --- the race ----------------------------------------------------------------------------

#: Raise these for a longer soak: ARCATURE_UNIQUE_RACE_THREADS=16 ARCATURE_UNIQUE_RACE_ROUNDS=50
THREADS = int(os.environ.get("ARCATURE_UNIQUE_RACE_THREADS", "8"))
ROUNDS = int(os.environ.get("ARCATURE_UNIQUE_RACE_ROUNDS", "10"))


def _race(key: str, *, in_transaction: bool) -> tuple[list[Any], list[BaseException]]:
    """THREADS threads, each on its own connection, enqueue ``key`` at one instant."""
    barrier = threading.Barrier(THREADS)
    results: list[Any] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def enqueue() -> None:
        try:
            barrier.wait(timeout=30)
            if in_transaction:  # as a view would: the enqueue commits with other writes
                with transaction.atomic():
                    job = add.using(unique_key=key).enqueue(1)
            else:
                job = add.using(unique_key=key).enqueue(1)
            with lock:
                results.append(job.pk)
        except BaseException as exc:  # reported by the caller, with the round
            with lock:
                errors.append(exc)
        finally:
            connections.close_all()  # each thread had its own connection

    threads = [threading.Thread(target=enqueue) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, errors


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("in_transaction", [False, True], ids=["autocommit", "atomic"])
def test_many_threads_enqueueing_one_key_at_once_make_exactly_one_row(
    in_transaction: bool,
) -> None:
    for round_number in range(ROUNDS):
        key = f"race-{round_number}"
        results, errors = _race(key, in_transaction=in_transaction)
        assert errors == [], f"round {round_number}: {errors!r}"
        rows = list(Job.objects.filter(unique_key=key).values_list("pk", flat=True))
        assert len(rows) == 1, f"round {round_number}: {len(rows)} rows for one key"
        assert len(results) == THREADS
        assert set(results) == {rows[0]}, f"round {round_number}: callers got other jobs"
    assert Job.objects.count() == ROUNDS


@pytest.mark.django_db(transaction=True)
def test_after_the_race_the_finished_job_frees_the_key_for_the_next_race() -> None:
    results, errors = _race("again", in_transaction=False)
    assert errors == []
    winner = Job.objects.get(unique_key="again")
    assert run_job(winner).status == JobStatus.SUCCEEDED
    results, errors = _race("again", in_transaction=False)
    assert errors == []
    assert Job.objects.filter(unique_key="again").count() == 1
    assert Job.objects.filter(task_name="api.add").count() == 2
    assert winner.pk not in results


@pytest.mark.django_db(transaction=True)
def test_when_the_first_holder_rolls_back_one_waiting_enqueue_takes_the_key() -> None:
    """Waiters blocked behind an uncommitted insert of the key: after its rollback, one wins.

    On MySQL/MariaDB this is the case where the waiters can deadlock each other
    (1213); the enqueue retries it, and no caller sees the error.
    """
    inserted = threading.Event()
    release = threading.Event()
    errors: list[BaseException] = []
    results: list[Any] = []
    lock = threading.Lock()

    class RollBack(Exception):
        pass

    def holder() -> None:
        try:
            with transaction.atomic():
                add.using(unique_key="rolled-back").enqueue(0)
                inserted.set()
                release.wait(timeout=30)
                raise RollBack
        except RollBack:
            pass
        except BaseException as exc:
            errors.append(exc)
        finally:
            inserted.set()
            connections.close_all()

    def waiter() -> None:
        try:
            job = add.using(unique_key="rolled-back").enqueue(1)
            with lock:
                results.append(job.pk)
        except BaseException as exc:
            with lock:
                errors.append(exc)
        finally:
            connections.close_all()

    first = threading.Thread(target=holder)
    first.start()
    assert inserted.wait(timeout=30)
    waiters = [threading.Thread(target=waiter) for _ in range(4)]
    for thread in waiters:
        thread.start()
    release.wait(timeout=0.5)  # let the waiters block on the uncommitted key
    release.set()
    first.join()
    for thread in waiters:
        thread.join()
    assert errors == []
    rows = list(Job.objects.filter(unique_key="rolled-back").values_list("pk", "payload"))
    assert len(rows) == 1
    assert rows[0][1] == {"args": [1], "kwargs": {}}  # a waiter's job, not the rolled-back one
    assert set(results) == {rows[0][0]}


@pytest.mark.only_on("mysql", reason="only InnoDB's waiters on a unique entry can deadlock")
@pytest.mark.django_db(transaction=True)
def test_on_mariadb_enqueues_of_one_key_take_turns_at_the_insert() -> None:
    """While another session has the key's turn, an enqueue of that key waits for it.

    Without turns, two enqueues waiting on one uncommitted holder of a key could
    deadlock (1213), which inside the caller's transaction reached the caller.
    """
    from django_arcature.db import driver_for

    holding, release, done = threading.Event(), threading.Event(), threading.Event()
    results: list[Any] = []

    def hold_the_turn() -> None:
        try:
            with driver_for("default").one_inserter_per_key("turns"):
                holding.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    def enqueue() -> None:
        try:
            with transaction.atomic():
                results.append(add.using(unique_key="turns").enqueue(1).pk)
        finally:
            done.set()
            connections.close_all()

    holder = threading.Thread(target=hold_the_turn)
    holder.start()
    assert holding.wait(timeout=30)
    waiter = threading.Thread(target=enqueue)
    waiter.start()
    try:
        assert not done.wait(timeout=1.0), "the enqueue did not wait for the key's turn"
        assert not Job.objects.filter(unique_key="turns").exists()
    finally:
        release.set()
        holder.join()
        waiter.join()
    assert done.is_set()
    assert list(Job.objects.filter(unique_key="turns").values_list("pk", flat=True)) == results
