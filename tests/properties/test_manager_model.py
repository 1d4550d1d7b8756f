"""A stateful model of ``Job.objects``: random programs of manager calls, checked after every step.

Hypothesis writes programs of enqueues (plain, delayed, unique-keyed), batch
claims, fenced completions with the current or a stale claim token (one by one
and batched), heartbeats, lease expiry (the lease is aged on the database
itself, so the sweep decides on the database's clock), sweeps, cancels,
requeues, run-now and prune. A small in-memory model says what each call must
do; after every step the whole table is compared with the model, and the
observer events sent during the step with the writes that landed:

* status and attempts agree; a claim token exists exactly while running, and it
  is the one the model expects;
* a unique key is held only by a live job, and only the key the model expects;
* every event matches exactly one landed write: none for a fenced-out write,
  and ``job_claim_lost`` at most once per lost claim (a worker drops a claim the
  first time it is told the claim is gone, so the model does the same);
* requeue, run-now and cancel restore or release everything a live job holds:
  a requeued job starts a new life (attempts 0, an empty attempt log, its
  derived unique key back unless a live job took it meanwhile).

The same program runs on SQLite, PostgreSQL and MariaDB. Profiles live in
``tests/properties/conftest.py`` (``HYPOTHESIS_PROFILE=soak`` for the long run).
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from django.db.models import F
from django.dispatch import Signal
from django.utils import timezone
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from django_arcature import signals
from django_arcature.managers import ClaimTransition, Completion
from django_arcature.models import Job, JobStatus
from django_arcature.tasks.results import LOST_WORKER_ID
from tests.integration import backend_tasks
from tests.integration.api_jobs import unique_sync
from tests.properties.conftest import PROFILE, TALLY

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.django_db(transaction=True)]

LIVE = {JobStatus.PENDING, JobStatus.RUNNING}
FINISHED = {JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED}
KEYS = ("k0", "k1", "k2")
#: A batch holding a stale and the current claim of one job was decided by job id alone
#: (issue 10, defect 2); fixed, so the model draws both claims of a job into one batch.
ONE_CLAIM_PER_JOB_IN_A_BATCH = False
#: Events that report no write (sent before an enqueue builds its rows, or by the thread
#: running a handler, which the model does not run): not compared with landed writes.
NOT_WRITES = {"jobs_enqueuing", "job_attempt_started", "job_attempt_finished"}
SIGNALS: dict[str, Signal] = {
    name: value
    for name, value in vars(signals).items()
    if isinstance(value, Signal) and name not in NOT_WRITES
}


@dataclass
class ModelJob:
    """What the model believes about one row."""

    id: uuid.UUID
    #: Creation order: programs pick jobs by it, never by their random ids, so
    #: Hypothesis replays a program exactly.
    seq: int
    priority: int
    max_attempts: int
    status: str = JobStatus.PENDING
    attempts: int = 0
    token: uuid.UUID | None = None
    unique_key: str | None = None
    #: The key a requeue gives back (a ``unique=True`` task's derived key), if any.
    derived_key: str | None = None
    due: bool = True
    lease_aged: bool = False
    #: A django.tasks job (``backend`` set): its result is checked after every step.
    is_task: bool = False
    #: The workers that claimed the job in its current life (a requeue starts a new one).
    life_workers: set[str] = field(default_factory=set)


@dataclass
class Claim:
    """A claim some worker holds; ``current`` is false once the job has moved on."""

    job_id: uuid.UUID
    token: uuid.UUID
    #: Who claimed, and the attempt log the claim read: a worker's completion
    #: writes that log plus this attempt's entry, as ``worker.dispatch`` does.
    worker: str = "model-worker"
    log: tuple[Any, ...] = ()


TALLY_NAME = "manager model"


class ManagerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        Job.objects.all().delete()
        self.jobs: dict[uuid.UUID, ModelJob] = {}
        self.seq = 0
        #: Claims a worker still holds: current ones and stale ones it has not yet
        #: been told about. A claim leaves this list the first time a write under
        #: it is fenced out (the worker drops it), as the real worker does.
        self.claims: list[Claim] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.expected: list[tuple[str, Any]] = []
        self.claim_lost_seen: Counter[tuple[uuid.UUID, uuid.UUID]] = Counter()
        self._receivers: list[tuple[Signal, Any]] = []
        for name, signal in SIGNALS.items():

            def receive(sender: Any, _name: str = name, **kwargs: Any) -> None:
                kwargs.pop("signal", None)
                self.events.append((_name, kwargs))

            signal.connect(receive, weak=False)
            self._receivers.append((signal, receive))
        TALLY.setdefault(TALLY_NAME, Counter())["examples"] += 1

    def teardown(self) -> None:
        for signal, receive in self._receivers:
            signal.disconnect(receive)

    # --- helpers -----------------------------------------------------------------------

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def current(self, claim: Claim) -> bool:
        job = self.jobs.get(claim.job_id)
        return job is not None and job.status == JobStatus.RUNNING and job.token == claim.token

    def live_key_holder(self, key: str) -> ModelJob | None:
        return next(
            (j for j in self.jobs.values() if j.unique_key == key and j.status in LIVE), None
        )

    def finish(self, job: ModelJob, status: str) -> None:
        job.status = status
        job.token = None
        job.lease_aged = False
        if status != JobStatus.PENDING:
            job.unique_key = None

    def expect(self, name: str, job_id: Any = None) -> None:
        self.expected.append((name, job_id))

    def fenced_out(self, claim: Claim, attempted: str) -> None:
        self.expect("job_claim_lost", (claim.job_id, claim.token, attempted))
        if claim in self.claims:
            self.claims.remove(claim)

    def pick(self, data: st.DataObject, pool: list[Any]) -> Any:
        return data.draw(st.sampled_from(pool))

    # --- enqueue -------------------------------------------------------------------------

    @rule(priority=st.integers(-2, 2), max_attempts=st.integers(1, 3), delayed=st.booleans())
    def enqueue(self, priority: int, max_attempts: int, delayed: bool) -> None:
        job = Job.objects.enqueue(
            "tests.noop",
            priority=priority,
            max_attempts=max_attempts,
            delay=3600 if delayed else None,
        )
        self.jobs[job.pk] = ModelJob(
            job.pk, self.next_seq(), priority, max_attempts, due=not delayed
        )
        self.expect("job_enqueued", job.pk)

    @rule(key=st.sampled_from(KEYS), priority=st.integers(-2, 2), delayed=st.booleans())
    def enqueue_with_key(self, key: str, priority: int, delayed: bool) -> None:
        job = Job.objects.enqueue(
            "tests.noop", unique_key=key, priority=priority, delay=3600 if delayed else None
        )
        holder = self.live_key_holder(key)
        if holder is not None:
            assert job.pk == holder.id, "a live job holds the key: the enqueue returns it"
            return
        assert job.pk not in self.jobs
        self.jobs[job.pk] = ModelJob(
            job.pk, self.next_seq(), priority, 3, unique_key=key, due=not delayed
        )
        self.expect("job_enqueued", job.pk)

    @rule(account=st.integers(0, 2))
    def enqueue_unique_task(self, account: int) -> None:
        """A ``unique=True`` task: the key is derived from the call."""
        job = unique_sync.using(max_attempts=2).enqueue(account)
        key = unique_sync.spec.unique_key([account], {})
        holder = self.live_key_holder(key)
        if holder is not None:
            assert job.pk == holder.id
            return
        self.jobs[job.pk] = ModelJob(job.pk, self.next_seq(), 0, 2, unique_key=key, derived_key=key)
        self.expect("job_enqueued", job.pk)

    @rule(a=st.integers(0, 3))
    def enqueue_django_task(self, a: int) -> None:
        """A django.tasks task: a row like the others, whose result is read back every step."""
        result = backend_tasks.add.enqueue(a, 1)
        row = Job.objects.get(pk=uuid.UUID(result.id))
        self.jobs[row.pk] = ModelJob(
            row.pk, self.next_seq(), row.priority, row.max_attempts, is_task=True
        )
        self.expect("job_enqueued", row.pk)

    # --- claim ---------------------------------------------------------------------------

    @rule(batch=st.integers(1, 3))
    def claim(self, batch: int) -> None:
        worker = f"w{self.next_seq()}"
        claimed = Job.objects.claim(worker, lease=60, batch=batch)
        available = [j for j in self.jobs.values() if j.status == JobStatus.PENDING and j.due]
        assert len(claimed) == min(batch, len(available)), (claimed, available)
        ids = {c.id for c in claimed}
        assert len(ids) == len(claimed), "a job claimed twice in one batch"
        assert ids <= {j.id for j in available}, "claimed a job that was not available"
        left = [j.priority for j in available if j.id not in ids]
        if claimed and left:
            assert min(c.priority for c in claimed) >= max(left), "priority order broken"
        if claimed:
            self.expect("jobs_claimed", (frozenset(ids), worker))
        tokens = {c.claim_token for c in claimed}
        assert len(tokens) == len(claimed)
        for c in sorted(claimed, key=lambda c: self.jobs[c.id].seq):
            job = self.jobs[c.id]
            assert c.claim_token not in {cl.token for cl in self.claims}, "a token reused"
            assert c.attempts == job.attempts + 1
            job.status = JobStatus.RUNNING
            job.attempts += 1
            job.token = c.claim_token
            job.lease_aged = False
            job.life_workers.add(worker)
            self.claims.append(Claim(c.id, c.claim_token, worker, tuple(c.attempt_log)))

    # --- fenced writes -------------------------------------------------------------------

    def _completion(self, claim: Claim, kind: str, due: bool) -> Completion:
        """What a worker would write: the outcome plus this attempt's attempt-log entry."""
        log = [*claim.log, {"worker": claim.worker, "error": None}]
        if kind == "succeeded":
            return Completion(
                claim.job_id, claim.token, "succeeded", result={"ok": 1}, attempt_log=log
            )
        if kind == "retry":
            when = timezone.now() + (timedelta(seconds=-5) if due else timedelta(hours=1))
            return Completion(
                claim.job_id, claim.token, "retry", available_at=when, message="r", attempt_log=log
            )
        return Completion(
            claim.job_id, claim.token, "dead", error_kind="permanent", message="d", attempt_log=log
        )

    def _land(self, completion: Completion, due: bool) -> None:
        """The model's side of a completion that must land."""
        job = self.jobs[completion.job_id]
        if completion.kind == "succeeded":
            self.finish(job, JobStatus.SUCCEEDED)
            self.expect("job_succeeded", job.id)
        elif completion.kind == "retry":
            self.finish(job, JobStatus.PENDING)
            job.due = due
            self.expect("job_retried", job.id)
        else:
            self.finish(job, JobStatus.DEAD)
            self.expect("job_dead", job.id)

    @precondition(lambda self: self.claims)
    @rule(data=st.data(), kind=st.sampled_from(["succeeded", "retry", "dead"]), due=st.booleans())
    def complete_one(self, data: st.DataObject, kind: str, due: bool) -> None:
        claim = self.pick(data, self.claims)
        completion = self._completion(claim, kind, due)
        should_land = self.current(claim)
        log = completion.attempt_log
        if kind == "succeeded":
            outcome = Job.objects.mark_succeeded(
                claim.job_id, claim.token, {"ok": 1}, attempt_log=log
            )
        elif kind == "retry":
            assert completion.available_at is not None
            outcome = Job.objects.mark_retry(
                claim.job_id, claim.token, completion.available_at, "r", attempt_log=log
            )
        else:
            outcome = Job.objects.mark_dead(
                claim.job_id, claim.token, "permanent", "d", attempt_log=log
            )
        assert outcome is (ClaimTransition.UPDATED if should_land else ClaimTransition.LOST)
        if should_land:
            self._land(completion, due)
            self.claims.remove(claim)
        else:
            self.fenced_out(claim, kind)

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def complete_batch(self, data: st.DataObject) -> None:
        """Several claims (current and stale) completed together, batched or in one transaction."""
        chosen = data.draw(
            st.lists(
                st.sampled_from(self.claims),
                min_size=1,
                max_size=4,
                unique_by=(lambda c: c.job_id) if ONE_CLAIM_PER_JOB_IN_A_BATCH else id,
            )
        )
        plans = [
            (
                claim,
                data.draw(st.sampled_from(["succeeded", "retry", "dead"])),
                data.draw(st.booleans()),
            )
            for claim in chosen
        ]
        completions = [self._completion(claim, kind, due) for claim, kind, due in plans]
        landing = [self.current(claim) for claim in chosen]
        if data.draw(st.booleans(), label="one statement per outcome (complete_batch)"):
            outcomes = Job.objects.complete_batch(completions)
        else:
            outcomes = Job.objects.complete_many(completions)
        expected = [ClaimTransition.UPDATED if ok else ClaimTransition.LOST for ok in landing]
        assert outcomes == expected
        for (claim, _kind, due), completion, ok in zip(plans, completions, landing, strict=True):
            if ok:
                self._land(completion, due)
                self.claims.remove(claim)
            else:
                self.fenced_out(claim, completion.kind)

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        claim = self.pick(data, self.claims)
        ok = self.current(claim)
        assert Job.objects.heartbeat(claim.job_id, claim.token, lease=60) is ok
        if ok:
            self.jobs[claim.job_id].lease_aged = False
        else:
            self.fenced_out(claim, "heartbeat")

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def heartbeat_many(self, data: st.DataObject) -> None:
        chosen = data.draw(
            st.lists(
                st.sampled_from(self.claims),
                min_size=1,
                max_size=4,
                unique_by=(lambda c: c.job_id) if ONE_CLAIM_PER_JOB_IN_A_BATCH else id,
            )
        )
        current = [self.current(claim) for claim in chosen]
        lost = Job.objects.heartbeat_many([(c.job_id, c.token) for c in chosen], lease=60)
        expected = {(c.job_id, c.token) for c, ok in zip(chosen, current, strict=True) if not ok}
        if all(isinstance(item, tuple) for item in lost):  # lost claims, as (id, token)
            assert lost == expected
        else:  # the older form: the ids of the lost claims
            assert lost == {job_id for job_id, _ in expected}
        for claim, ok in zip(chosen, current, strict=True):
            if ok:
                self.jobs[claim.job_id].lease_aged = False
            else:
                self.fenced_out(claim, "heartbeat")

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """Graceful shutdown hands a running job back without using up its attempt."""
        claim = self.pick(data, self.claims)
        ok = self.current(claim)
        outcome = Job.objects.release(claim.job_id, claim.token)
        assert outcome is (ClaimTransition.UPDATED if ok else ClaimTransition.LOST)
        if not ok:
            self.fenced_out(claim, "release")
            return
        job = self.jobs[claim.job_id]
        self.finish(job, JobStatus.PENDING)
        job.attempts -= 1
        job.due = True
        self.claims.remove(claim)
        self.expect("job_released", job.id)

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def claim_one_job(self, data: st.DataObject) -> None:
        """Claim a chosen job whatever its availability (eager mode, testing.run_job)."""
        self.claim_one_job_by_id(self.pick(data, sorted(self.jobs.values(), key=lambda j: j.seq)))

    def claim_one_job_by_id(self, job: ModelJob) -> None:
        worker = f"w{self.next_seq()}"
        claimed = Job.objects.claim_job(job.id, worker, lease=60)
        if job.status != JobStatus.PENDING:
            assert claimed is None
            return
        assert claimed is not None
        self.expect("jobs_claimed", (frozenset({job.id}), worker))
        assert claimed.attempts == job.attempts + 1
        job.status = JobStatus.RUNNING
        job.attempts += 1
        job.token = claimed.claim_token
        job.lease_aged = False
        job.life_workers.add(worker)
        self.claims.append(Claim(job.id, claimed.claim_token, worker, tuple(claimed.attempt_log)))

    # --- time and recovery ---------------------------------------------------------------

    @precondition(lambda self: any(j.status == JobStatus.RUNNING for j in self.jobs.values()))
    @rule(data=st.data())
    def lease_expires(self, data: st.DataObject) -> None:
        """The worker stops heartbeating: its lease runs out, on the database's clock."""
        running = sorted(
            (j for j in self.jobs.values() if j.status == JobStatus.RUNNING), key=lambda j: j.seq
        )
        job = self.pick(data, running)
        Job.objects.filter(pk=job.id).update(lease_expires_at=F("locked_at") - timedelta(days=1))
        job.lease_aged = True

    @precondition(lambda self: any(j.status == JobStatus.RUNNING for j in self.jobs.values()))
    @rule(data=st.data())
    def another_worker_takes_over(self, data: st.DataObject) -> None:
        """A worker stalls, the sweep returns its job, another worker claims it at once.

        The three steps the rules above can also reach one by one, in one step, so
        that short programs often hold a stale and a current claim of one job.
        """
        self.lease_expires(data)
        self.sweep()
        taken = [j for j in self.jobs.values() if j.status == JobStatus.PENDING and j.due]
        if taken:
            self.claim_one_job_by_id(min(taken, key=lambda j: j.seq))

    @rule()
    def sweep(self) -> None:
        swept = Job.objects.sweep_expired_leases()
        expired = [j for j in self.jobs.values() if j.status == JobStatus.RUNNING and j.lease_aged]
        assert swept == len(expired)
        dead = [j.id for j in expired if j.attempts >= j.max_attempts]
        requeued = [j.id for j in expired if j.attempts < j.max_attempts]
        for job in expired:
            if job.attempts >= job.max_attempts:
                self.finish(job, JobStatus.DEAD)
            else:
                self.finish(job, JobStatus.PENDING)
                job.due = True
        if expired:
            self.expect("jobs_swept", (frozenset(dead + requeued), len(requeued), len(dead)))

    # --- operator actions ----------------------------------------------------------------

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job = self.pick(data, sorted(self.jobs.values(), key=lambda j: j.seq))
        changed = Job.objects.cancel(job.id)
        assert changed == (1 if job.status in LIVE else 0)
        if changed:
            self.finish(job, JobStatus.CANCELLED)
            self.expect("job_cancelled", job.id)

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        job = self.pick(data, sorted(self.jobs.values(), key=lambda j: j.seq))
        changed = Job.objects.requeue_dead(job.id)
        key = job.derived_key
        refused = key is not None and self.live_key_holder(key) is not None
        if job.status != JobStatus.DEAD or refused:
            assert changed == 0
            return
        assert changed == 1
        job.status = JobStatus.PENDING
        job.attempts = 0
        job.due = True
        job.unique_key = key
        job.life_workers = set()
        self.expect("job_requeued", job.id)
        row = Job.objects.get(pk=job.id)
        assert row.attempt_log == [], "a requeued job starts a new life: no old attempts"
        assert (row.error_kind, row.last_error, row.failed_at) == ("", "", None)

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def run_now(self, data: st.DataObject) -> None:
        job = self.pick(data, sorted(self.jobs.values(), key=lambda j: j.seq))
        changed = Job.objects.run_now(job.id)
        assert changed == (1 if job.status == JobStatus.PENDING else 0)
        if changed:
            job.due = True

    @rule(statuses=st.sets(st.sampled_from(sorted(FINISHED)), min_size=1))
    def prune(self, statuses: set[str]) -> None:
        """Finished rows of the chosen statuses, aged past the cutoff, are deleted; no others."""
        Job.objects.filter(status__in=FINISHED).update(
            finished_at=F("finished_at") - timedelta(days=2)
        )
        deleted = Job.objects.prune(timedelta(days=1), statuses=sorted(statuses))
        gone = [j.id for j in self.jobs.values() if j.status in statuses]
        assert deleted == len(gone)
        for job_id in gone:
            del self.jobs[job_id]

    # --- the checks after every step -----------------------------------------------------

    @invariant()
    def table_matches_the_model(self) -> None:
        tally = TALLY.setdefault(TALLY_NAME, Counter())
        tally["steps"] += 1
        rows = {
            row["id"]: row
            for row in Job.objects.values(
                "id", "status", "attempts", "claim_token", "unique_key", "attempt_log"
            )
        }
        assert set(rows) == set(self.jobs), "rows lost or invented"
        for job_id, job in self.jobs.items():
            row = rows[job_id]
            assert row["status"] == job.status, (job, row)
            assert row["attempts"] == job.attempts, (job, row)
            assert (row["claim_token"] is not None) == (row["status"] == JobStatus.RUNNING)
            assert row["claim_token"] == job.token, (job, row)
            assert row["unique_key"] == (job.unique_key if job.status in LIVE else None), (
                job,
                row,
            )
        keys = [row["unique_key"] for row in rows.values() if row["unique_key"] is not None]
        assert len(keys) == len(set(keys))

    @invariant()
    def task_results_report_the_current_life(self) -> None:
        """A django.tasks result counts this life's attempts, and names only its workers."""
        for job in self.jobs.values():
            if not job.is_task:
                continue
            result = backend_tasks.add.get_result(str(job.id))
            assert result.attempts == job.attempts, (job, result.worker_ids)
            assert len(result.worker_ids) == job.attempts, (job, result.worker_ids)
            strangers = set(result.worker_ids) - job.life_workers - {LOST_WORKER_ID}
            assert not strangers, f"workers of an earlier life reported: {strangers}"
            assert len(result.errors) <= job.attempts

    @invariant()
    def events_match_the_landed_writes(self) -> None:
        got = [self._event_key(name, kwargs) for name, kwargs in self.events]
        want = list(self.expected)
        self.events.clear()
        self.expected.clear()
        assert sorted(got, key=repr) == sorted(want, key=repr), (got, want)
        for name, key in got:
            if name == "job_claim_lost":
                self.claim_lost_seen[key[:2]] += 1
                assert self.claim_lost_seen[key[:2]] == 1, "job_claim_lost twice for one claim"

    @staticmethod
    def _event_key(name: str, kwargs: dict[str, Any]) -> tuple[str, Any]:
        if name == "job_enqueued":
            return name, kwargs["job"].pk
        if name == "job_claim_lost":
            return name, (kwargs["job_id"], kwargs["claim_token"], kwargs["attempted"])
        if name == "jobs_claimed":
            return name, (frozenset(job.id for job in kwargs["jobs"]), kwargs["worker_id"])
        if name == "jobs_swept":
            return name, (frozenset(kwargs["job_ids"]), kwargs["requeued"], kwargs["dead"])
        return name, kwargs.get("job_id")


def test_the_manager_behaves_like_its_model() -> None:
    """Random programs of manager calls agree with the model after every step."""
    before = Counter(TALLY.get(TALLY_NAME, Counter()))
    # CI: 40 programs of up to 40 steps per database, new ones every run (the ci
    # profile is not derandomized), on the three databases of the newest environment;
    # ``make soak`` (ARCATURE_SOAK=1) runs the soak profile's 400 of up to 80 steps.
    chosen = settings() if PROFILE == "soak" else settings(max_examples=40)
    run_state_machine_as_test(ManagerModel, settings=chosen)
    after = TALLY[TALLY_NAME]
    assert after["examples"] > before["examples"]
    assert after["steps"] > before["steps"]
