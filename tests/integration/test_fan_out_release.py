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
import zlib
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
from django_arcature.workflows.models import EdgeState, WorkflowCounter, WorkflowEdge, WorkflowNode
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


def test_edges_written_before_the_sole_column_release_through_the_count() -> None:
    """Edges of 0016 and before read ``sole = false``: their dependents take the general
    path (lock, count of open edges down to zero) and are released all the same."""
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
def test_a_sibling_waiting_for_the_dependents_lock_counts_from_the_others_count() -> None:
    """Two last siblings at once: the second, queued on the dependent's row lock,
    counts the dependent's open edges down from the count the first committed, so it
    reaches zero and releases.

    The first holds its transaction open (its edge counted, the dependent locked and
    left waiting) until the second is queued on the lock; then it commits. Were the
    count read before the lock (or with the lock's own snapshot), the second would
    leave one edge open, and the fan-in would wait for ever.
    """
    flow = Workflow("two at once")
    ups = [flow.add(wf.step, str(i)) for i in range(2)]
    sink = flow.add(wf.step, "sink", after=ups)
    flow.enqueue()
    first, second = (claim(n.job_id) for n in ups)

    def complete_second() -> None:
        outcome = Job.objects.mark_succeeded(second.id, second.claim_token)
        assert outcome is ClaimTransition.UPDATED

    # Let go only once the second is queued on a lock (the dependent's row).
    complete_held_open_while(first.id, first.claim_token, complete_second, "second")
    assert fresh(sink.job_id).status == JobStatus.PENDING
    assert WorkflowNode.objects.get(job_id=sink.job_id).open_upstreams == 0


@needs_two_writers
def test_a_requeue_racing_a_sibling_completion_counts_what_committed() -> None:
    """An operator requeues X, whose death cancelled D, while D's other upstream V is
    completing on a worker: D comes back waiting for X alone, and X's success releases it.

    The worker holds V's completion open (V succeeded, its edge into D read, D
    cancelled so not counted) until the requeue is queued on a lock; then it
    commits. The requeue locks D's upstreams before it counts D's open edges, so it
    counts after V's commit. Had it read V's status without that lock it would have
    seen V running, counted two open edges, and D would wait for ever.
    """
    while True:
        flow = Workflow("requeue racing a sibling")
        x = flow.add(wf.step, "x")
        v = flow.add(wf.step, "v")
        d = flow.add(wf.step, "d", after=[x, v])
        # W keeps the workflow busy in V's completion, which then leaves the workflow's
        # row alone; and V's completion and the requeue write different counter
        # shards. Either would make the requeue queue there and count after V's
        # commit by chance.
        y = flow.add(wf.step, "y")
        flow.add(wf.step, "w", after=[v, y])
        shards = dependencies.workflow_shards(5)
        shard = {n: zlib.crc32(n.job_id.bytes) % shards for n in (x, v, d)}
        if shard[v] not in (shard[x], shard[d]):
            break
    flow.enqueue()
    dying = claim(x.job_id)
    assert Job.objects.mark_dead(x.job_id, dying.claim_token, "permanent", "boom") is (
        ClaimTransition.UPDATED
    )
    assert fresh(d.job_id).status == JobStatus.CANCELLED
    running = claim(v.job_id)

    def requeue_x() -> None:
        assert Job.objects.requeue_dead(x.job_id) == 1

    complete_held_open_while(v.job_id, running.claim_token, requeue_x, "requeue")
    assert fresh(d.job_id).status == JobStatus.WAITING
    assert WorkflowNode.objects.get(job_id=d.job_id).open_upstreams == 1
    again = claim(x.job_id)
    assert Job.objects.mark_succeeded(x.job_id, again.claim_token) is ClaimTransition.UPDATED
    assert fresh(d.job_id).status == JobStatus.PENDING


def complete_held_open_while(
    job_id: uuid.UUID, token: uuid.UUID, second: Callable[[], None], what: str
) -> None:
    """Complete ``job_id`` (succeeded) in a transaction held open until ``second``,
    run in another thread, is queued on a lock; then commit, and let ``second`` end."""
    holding, release, second_done = threading.Event(), threading.Event(), threading.Event()

    def complete_first() -> None:
        with transaction.atomic():
            outcome = Job.objects.mark_succeeded(job_id, token)
            assert outcome is ClaimTransition.UPDATED
            holding.set()
            assert release.wait(30)

    def run_second() -> None:
        second()
        second_done.set()

    thread, errors = in_thread(complete_first)
    assert holding.wait(30)
    other, other_errors = in_thread(run_second)
    assert waiting_for_a_lock(lambda: second_done.is_set()), f"the {what} never queued"
    assert not second_done.is_set()
    release.set()
    thread.join(30)
    other.join(30)
    assert not errors, errors
    assert not other_errors, other_errors


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


def test_a_wide_fan_ins_completions_write_no_edge_and_count_the_sink_down() -> None:
    """Flushes of a wide fan-in's middle nodes leave every edge row as built and take
    the sink's count of open edges down by the nodes each flush finished.

    Writing each edge (a row version in every index of the edge table) was a
    fan-in node's largest cost; the count is one row per dependent and flush.
    """
    width = 300
    _, (root, *middle), sink = fan(width)
    token = claim(root.job_id).claim_token
    assert Job.objects.mark_succeeded(root.job_id, token) is ClaimTransition.UPDATED
    done = 0
    for start in range(0, width - 1, 100):
        flush = [claim(node.job_id) for node in middle[: width - 1][start : start + 100]]
        completions = [
            Completion(job.id, job.claim_token, "succeeded", attempt_log=[]) for job in flush
        ]
        assert Job.objects.write_completions(completions)
        done += len(flush)
        assert not WorkflowEdge.objects.exclude(state=EdgeState.OPEN).exists()
        assert WorkflowNode.objects.get(job_id=sink.job_id).open_upstreams == width - done
        assert fresh(sink.job_id).status == JobStatus.WAITING
    last = claim(middle[-1].job_id)
    assert Job.objects.mark_succeeded(last.id, last.claim_token) is ClaimTransition.UPDATED
    assert fresh(sink.job_id).status == JobStatus.PENDING
    assert set(dependencies.edge_states("default", Job).values()) == {EdgeState.MET}
