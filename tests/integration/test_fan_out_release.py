"""A wide fan-out's release: every dependent claimable at once, the idle workers woken.

The root of a 1 → n → 1 workflow releases its n dependents in its completion's
transaction. Once that commits they must be claimable by any worker straight away
(``available_at`` no later than the database's now, nothing else in the way), and
the workers on this host must be nudged: a worker that idles until its next poll
while thousands of nodes wait is the stall this guards against.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from django.db import connection, connections, transaction
from django.test import override_settings

from django_arcature import Workflow
from django_arcature.db import DatabaseNow
from django_arcature.db.claimed import ClaimedJob
from django_arcature.hints import HintReceiver
from django_arcature.manager import dependencies
from django_arcature.models import Job, JobStatus
from django_arcature.transitions import ClaimTransition, Completion
from django_arcature.workflows.build import Node
from django_arcature.workflows.models import EdgeState, WorkflowCounter, WorkflowEdge
from tests.testapp import workflow_jobs as wf

from .conftest import fresh

pytestmark = pytest.mark.django_db(transaction=True)

#: Wide enough that the root's statements carry thousands of ids each (the benchmark
#: runs 10,000).
WIDTH = 2_500


@pytest.fixture
def hint_dir() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="arc-f-", dir="/tmp")  # a socket path is short
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def claim(job_id: uuid.UUID) -> ClaimedJob:
    """Claim exactly this job, which must be pending."""
    claimed = Job.objects.claim_job(job_id, "w1", 60)
    assert claimed is not None, f"{job_id} was not claimable"
    return claimed


def fan(width: int) -> tuple[Workflow, list[Node], Node]:
    flow = Workflow("wide release")
    root = flow.add(wf.step, "root")
    middle = [flow.add(wf.step, f"m{i}", after=[root]) for i in range(width)]
    sink = flow.add(wf.step, "sink", after=middle)
    flow.enqueue()
    return flow, [root, *middle], sink


def test_a_wide_release_is_claimable_at_once_and_wakes_the_workers(hint_dir: str) -> None:
    _, (root, *middle), sink = fan(WIDTH)
    token = claim(root.job_id).claim_token
    woken = threading.Event()
    with override_settings(ARCATURE={"WAKE_HINT_DIR": hint_dir}):
        receiver = HintReceiver("default", woken.set)
        assert receiver.start()
        try:
            assert Job.objects.mark_succeeded(root.job_id, token) is ClaimTransition.UPDATED
            # Sent once the release committed: the idle worker claims now, not at its poll.
            assert woken.wait(10), "the release did not wake this host's workers"
        finally:
            receiver.close()
    assert Job.objects.filter(status=JobStatus.PENDING).count() == WIDTH
    # The root's edges are the only ones into their dependents: met, and not rewritten
    # (the dependents' release says it); the middle nodes' edges into the sink are open.
    assert not WorkflowEdge.objects.exclude(state=EdgeState.OPEN).exists()
    states = dependencies.edge_states("default", Job)
    assert Counter(states.values()) == {EdgeState.MET: WIDTH, EdgeState.OPEN: WIDTH}
    # None is dated after the database's now: none waits for a clock to pass.
    assert not Job.objects.filter(status=JobStatus.PENDING, available_at__gt=DatabaseNow()).exists()
    claimed = Job.objects.claim("w2", lease=60, batch=WIDTH)
    assert sorted(job.id for job in claimed) == sorted(node.job_id for node in middle)
    assert fresh(sink.job_id).status == JobStatus.WAITING


def test_siblings_finished_together_release_the_fan_in_once() -> None:
    """The last flush sees every sibling's edge; counts land on one shard per flush."""
    _, (root, *middle), sink = fan(40)
    token = claim(root.job_id).claim_token
    assert Job.objects.mark_succeeded(root.job_id, token) is ClaimTransition.UPDATED
    for part in (middle[:25], middle[25:]):
        claims = [claim(node.job_id) for node in part]
        assert fresh(sink.job_id).status == JobStatus.WAITING
        outcomes = Job.objects.complete_batch(
            [Completion(c.id, c.claim_token, "succeeded") for c in claims]
        )
        assert outcomes == [ClaimTransition.UPDATED] * len(part)
    assert fresh(sink.job_id).status == JobStatus.PENDING
    finished = sum(WorkflowCounter.objects.values_list("finished", flat=True))
    assert finished == 41  # the root and the 40: the sink has not run


def test_edges_know_whether_they_are_the_only_one_into_their_dependent() -> None:
    _, (_root, *middle), sink = fan(3)
    sole = dict(WorkflowEdge.objects.values_list("downstream_id", "sole").distinct())
    assert sole == {**{node.job_id: True for node in middle}, sink.job_id: False}


def test_a_sole_dependent_cancelled_meanwhile_stays_cancelled() -> None:
    """The release of a dependent whose only edge is met is a compare-and-set on
    ``waiting``: one an operator cancelled first is not brought back to ``pending``."""
    _, (root, *middle), sink = fan(3)
    Job.objects.cancel(middle[1].job_id)
    token = claim(root.job_id).claim_token
    with transaction.atomic():
        assert Job.objects.mark_succeeded(root.job_id, token) is ClaimTransition.UPDATED
    statuses = dict(Job.objects.values_list("id", "status"))
    assert statuses[middle[0].job_id] == JobStatus.PENDING
    assert statuses[middle[1].job_id] == JobStatus.CANCELLED
    assert statuses[middle[2].job_id] == JobStatus.PENDING
    # The sink needed every middle node to succeed: the cancel let it go already.
    assert statuses[sink.job_id] == JobStatus.CANCELLED


def test_settle_reports_the_sole_and_the_shared_dependents_it_released() -> None:
    """One completion with both kinds of dependent: ``a`` has the root as its only
    upstream, ``b`` waits for the root and for ``other``, which finished first."""
    flow = Workflow("mixed")
    root, other = flow.add(wf.step, "root"), flow.add(wf.step, "other")
    a = flow.add(wf.step, "a", after=[root])
    b = flow.add(wf.step, "b", after=[root, other])
    flow.enqueue()
    done = claim(other.job_id)
    assert Job.objects.mark_succeeded(done.id, done.claim_token) is ClaimTransition.UPDATED
    assert fresh(b.job_id).status == JobStatus.WAITING
    running = claim(root.job_id)
    with transaction.atomic():
        done_now = Job.objects.filter(id=running.id)
        assert done_now.update(status=JobStatus.SUCCEEDED, claim_token=None)
        released = dependencies.settle("default", Job, {running.id: dependencies.SUCCEEDED})
    assert sorted(released) == sorted([a.job_id, b.job_id])
    assert fresh(a.job_id).status == JobStatus.PENDING
    assert fresh(b.job_id).status == JobStatus.PENDING


def test_edges_written_before_the_sole_column_release_through_the_probe() -> None:
    """Edges of 0016 and before read ``sole = false``: their dependents take the general
    path (lock, probe) and are released all the same."""
    _, (root, *middle), sink = fan(5)
    WorkflowEdge.objects.update(sole=False)
    token = claim(root.job_id).claim_token
    assert Job.objects.mark_succeeded(root.job_id, token) is ClaimTransition.UPDATED
    pending = set(Job.objects.filter(status=JobStatus.PENDING).values_list("id", flat=True))
    assert pending == {node.job_id for node in middle}
    assert fresh(sink.job_id).status == JobStatus.WAITING


needs_two_writers = pytest.mark.only_on(
    "postgresql", "mysql", reason="SQLite runs one writer at a time"
)


@needs_two_writers
def test_a_sibling_waiting_for_the_dependents_lock_sees_the_others_edge() -> None:
    """Two last siblings at once: the second, queued on the dependent's row lock, reads
    the edges after the lock is granted, so it sees the first's edge met and releases.

    The first holds its transaction open (its edge met, the dependent locked and left
    waiting) until the second is queued on the lock; then it commits. Were the edges
    read with the lock's own snapshot (or before it), the second would see the first's
    edge open, and the fan-in would wait for ever.
    """
    flow = Workflow("two at once")
    ups = [flow.add(wf.step, str(i)) for i in range(2)]
    sink = flow.add(wf.step, "sink", after=ups)
    flow.enqueue()
    first, second = (claim(n.job_id) for n in ups)
    holding = threading.Event()
    release = threading.Event()

    def complete_first() -> None:
        with transaction.atomic():
            outcome = Job.objects.mark_succeeded(first.id, first.claim_token)
            assert outcome is ClaimTransition.UPDATED
            holding.set()
            assert release.wait(30)

    thread, errors = in_thread(complete_first)
    assert holding.wait(30)
    second_done = threading.Event()

    def complete_second() -> None:
        outcome = Job.objects.mark_succeeded(second.id, second.claim_token)
        assert outcome is ClaimTransition.UPDATED
        second_done.set()

    other, other_errors = in_thread(complete_second)
    # Let go only once the second is queued on a lock (the dependent's row).
    assert waiting_for_a_lock(lambda: second_done.is_set()), "the second never queued"
    assert not second_done.is_set()
    release.set()
    thread.join(30)
    other.join(30)
    assert not errors, errors
    assert not other_errors, other_errors
    assert fresh(sink.job_id).status == JobStatus.PENDING


#: Sessions of this database waiting for a row lock right now. On MariaDB a locking
#: read of one primary key waits inside the optimizer (state "Statistics"), before
#: INNODB_TRX lists it as waiting: the statement still running is what shows. So does an
#: UPDATE queued on a row lock (the workflow's counter shard, written before the
#: dependents' lock), in state "Updating".
LOCK_WAITERS = {
    "postgresql": "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE NOT l.granted AND a.datname = current_database()",
    "mysql": "SELECT count(*) FROM information_schema.PROCESSLIST p WHERE p.DB = DATABASE() "
    "AND p.ID <> CONNECTION_ID() AND p.COMMAND = 'Query' AND (p.INFO LIKE '%%FOR UPDATE%%' "
    "OR (p.STATE = 'Updating' AND p.INFO LIKE 'UPDATE%%'))",
}


def waiting_for_a_lock(gave_up: Callable[[], bool]) -> bool:
    """Poll until some transaction waits for a lock (True), or ``gave_up()`` (False)."""
    deadline = time.monotonic() + 60
    with connection.cursor() as cursor:
        while time.monotonic() < deadline and not gave_up():
            cursor.execute(LOCK_WAITERS[connection.vendor])
            if cursor.fetchone()[0]:
                return True
            time.sleep(0.01)
    return False


def in_thread(target: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


@pytest.mark.only_on("postgresql", reason="reads PostgreSQL's index statistics")
def test_the_fan_in_probe_does_not_step_over_the_met_edges() -> None:
    """The probe's cost does not grow with the siblings already finished.

    Most of a fan-in's edges are met in the order they were written, while an older
    snapshot keeps their dead versions from being pruned (as a concurrent
    transaction does). On an index of (downstream, state) alone the probe stepped over
    every one of them, under the dependent's lock: the stalled benchmark rounds. On
    ``arcature_edge_down_idx`` as it is, it reads a few entries (501 on the old index).
    """
    width = 600
    _, (root, *middle), sink = fan(width)
    token = claim(root.job_id).claim_token
    assert Job.objects.mark_succeeded(root.job_id, token) is ClaimTransition.UPDATED
    holding, done = threading.Event(), threading.Event()

    def hold_a_snapshot() -> None:
        with transaction.atomic():
            Job.objects.filter(id=sink.job_id).exists()  # the snapshot is taken here
            holding.set()
            assert done.wait(60)

    thread, errors = in_thread(hold_a_snapshot)
    try:
        assert holding.wait(30)
        finished = [node.job_id for node in middle[: width - 100]]  # in the order written
        with transaction.atomic():
            marked, _ = dependencies._mark_edges("default", finished, dependencies.SUCCEEDED)
            assert len(marked) == 1  # the sink, from every one of its edges marked
        before = index_entries_read()
        flags = dependencies._edge_flags("default", Job, [sink.job_id])
        read = index_entries_read() - before
    finally:
        done.set()
        thread.join(30)
    assert not errors, errors
    assert flags == [(sink.job_id, True, False)]
    assert read < 100, f"the probe read {read} index entries past {width - 100} met edges"


def index_entries_read() -> int:
    """Entries ``arcature_edge_down_idx`` has handed to scans so far (live or dead)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")  # this session's counts, now
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT idx_tup_read FROM pg_stat_user_indexes "
            "WHERE indexrelname = 'arcature_edge_down_idx'"
        )
        return int(cursor.fetchone()[0])
