"""Chaos soak for workflows and batches: random DAGs and batches drained by worker
processes that are SIGKILLed at random (and, on PostgreSQL and MariaDB, whose
database sessions are killed on the server).

Every node's body appends its label to a file, once per run. At the end:

- every node ran at least once, and never before each of its upstream nodes had
  run (its first line comes after theirs);
- every job (node, member, callback) is ``succeeded`` with exactly one landed
  completion (one attempt-log entry: only a landed write appends one), and no
  ``job_succeeded`` event was sent twice for a job;
- every workflow reads ``succeeded`` on its own row, finished once;
- every batch enqueued each of its two callbacks exactly once, and both ran.

- every edge is ``met`` and every workflow's and batch's counter shards sum to exactly
  its nodes (members): a completion counted twice, or a fan-in released by two
  upstreams' completions each believing it was last, would show as a count off by one.

CI: a few small workflows and batches per database, in seconds. ``ARCATURE_SOAK=1``
(``make soak-workflows``): 30 workflows and 10 batches, about 20 s on an idle host.
``ARCATURE_CHAOS_SCALE=N`` multiplies the workflows and batches (and so the faults a
run has time for): ``make soak-workflows CHAOS_SCALE=10`` took several minutes per
database. The counts are printed on one ``workflow chaos summary`` line.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Sum

from django_arcature import Batch, Workflow
from django_arcature.manager.dependencies import edge_states
from django_arcature.models import Job, JobStatus
from django_arcature.workflows.build import Node
from django_arcature.workflows.models import (
    BatchCounter,
    BatchRun,
    EdgeState,
    WorkflowCounter,
    WorkflowEdge,
    WorkflowRun,
)
from tests.faults.processes import FaultWorker, event_counts
from tests.testapp import workflow_jobs as wf

from .fleet import Chaos, run_under_faults

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.heavy]

SOAK = os.environ.get("ARCATURE_SOAK") == "1"
#: A longer soak: this many times the workflows and batches (the faults keep their pace).
SCALE = max(1, int(os.environ.get("ARCATURE_CHAOS_SCALE", "1")))
WORKFLOWS = (30 if SOAK else 3) * SCALE
#: Nodes per workflow, drawn uniformly; each waits for up to FAN_IN earlier nodes.
NODES = (5, 40) if SOAK else (4, 8)
FAN_IN = 6 if SOAK else 3
BATCHES = (10 if SOAK else 2) * SCALE
MEMBERS = (10, 100) if SOAK else (3, 6)
#: Faults injected at most (CI: a few, then the fleet drains what is left).
MAX_FAULTS = None if SOAK else 4
WORKERS = 3
CONCURRENCY = 2
BATCH = 5
LEASE = 2
#: Seconds between two faults: long enough for a replacement worker to start and drain
#: some (a fault every second kept a loaded host's fleet mostly starting up).
PAUSE = (1.5, 4.0) if SOAK else (0.4, 0.9)
TIMEOUT = (1800 if SOAK else 150) * SCALE
#: How long each body runs: long enough for a SIGKILL to land in the middle of some.
BODY_SECONDS = 0.05


def build(chance: random.Random, runs: Path) -> tuple[dict[str, list[str]], list[Workflow]]:
    """Random DAGs (edges only from earlier nodes: acyclic by construction)."""
    upstream_of: dict[str, list[str]] = {}
    flows = []
    recorded = wf.record.using(max_attempts=50)
    for w in range(WORKFLOWS):
        flow = Workflow(f"chaos {w}")
        nodes: list[tuple[str, Node]] = []
        for n in range(chance.randint(*NODES)):
            label = f"w{w}n{n}"
            ups = chance.sample(nodes, k=min(len(nodes), chance.randint(0, FAN_IN)))
            node = flow.add(
                recorded, str(runs), label, BODY_SECONDS, after=[node for _, node in ups]
            )
            upstream_of[label] = [name for name, _ in ups]
            nodes.append((label, node))
        flow.enqueue()
        flows.append(flow)
    return upstream_of, flows


def test_chaos_workflows_and_batches_fire_exactly_once(
    tmp_path: Path, fleet: list[FaultWorker], monkeypatch: pytest.MonkeyPatch
) -> None:
    seed = int(os.environ.get("ARCATURE_CHAOS_SEED", str(random.randrange(1 << 30))))
    chance = random.Random(seed)
    runs = tmp_path / "runs.txt"
    monkeypatch.setenv("ARCATURE_WF_RUNS", str(runs))
    upstream_of, _flows = build(chance, runs)
    batches = []
    recorded = wf.record.using(max_attempts=50)
    for b in range(BATCHES):
        batch = Batch(on_success=wf.batch_record, on_finish=wf.batch_done, name=f"chaos {b}")
        for m in range(chance.randint(*MEMBERS)):
            label = f"b{b}m{m}"
            batch.add(recorded, str(runs), label, BODY_SECONDS)
            upstream_of[label] = []
        batches.append(batch.enqueue())
    events = tmp_path / "events.txt"
    args = ["--concurrency", str(CONCURRENCY), "--batch", str(BATCH), "--lease", str(LEASE)]
    callbacks = 2 * BATCHES

    def unfinished() -> int:
        """Jobs not succeeded yet, or 1 while a batch callback is still to be enqueued."""
        left = Job.objects.exclude(status=JobStatus.SUCCEEDED).count()
        fired = Job.objects.filter(task_name__in=("wf.batch_record", "wf.batch_done")).count()
        return left or int(fired < callbacks)

    chaos = Chaos(
        pause=PAUSE,
        session_chance=0.3,
        timeout=TIMEOUT,
        # Workers still starting up hold nothing: kill one that is draining.
        only_started=True,
        max_faults=MAX_FAULTS,
    )
    faults = run_under_faults(chance, fleet, events, args, WORKERS, chaos, unfinished, seed)
    sigkills, session_kills = faults.sigkills, faults.session_kills

    lines = runs.read_text().splitlines()
    first: dict[str, int] = {}
    for index, line in enumerate(lines):
        first.setdefault(line, index)
    # Every body ran at least once, after every upstream body had run.
    assert set(upstream_of) <= set(first), sorted(set(upstream_of) - set(first))[:10]
    order_broken = [
        (label, up) for label, ups in upstream_of.items() for up in ups if first[up] > first[label]
    ]
    assert order_broken == []
    jobs = list(Job.objects.values_list("id", "status", "attempt_log", "task_name", "payload"))
    assert {status for _, status, _, _, _ in jobs} == {"succeeded"}
    # One landed completion per job, and never two job_succeeded events for one.
    assert [str(pk) for pk, _, log, _, _ in jobs if len(log) != 1] == []
    counts = event_counts(events)
    assert max(counts[("job_succeeded", str(pk))] for pk, *_ in jobs) == 1
    # Every workflow finished (its last node's transaction wrote it), as succeeded.
    assert Counter(WorkflowRun.objects.values_list("outcome", flat=True)) == {
        "succeeded": WORKFLOWS
    }
    # Each batch enqueued each callback exactly once, and each callback ran.
    fired_for = Counter(
        (task, payload["args"][0])
        for _, _, _, task, payload in jobs
        if task in ("wf.batch_record", "wf.batch_done")
    )
    expected = {
        (task, str(batch.id)) for batch in batches for task in ("wf.batch_record", "wf.batch_done")
    }
    assert set(fired_for) == expected
    assert set(fired_for.values()) == {1}
    # The stored callback ids are those jobs: one each, never overwritten by a second fire.
    callback_ids = {
        (task, payload["args"][0]): pk
        for pk, _, _, task, payload in jobs
        if task in ("wf.batch_record", "wf.batch_done")
    }
    stored = BatchRun.objects.filter(id__in=[batch.id for batch in batches])
    for batch_id, success_job, finish_job in stored.values_list(
        "id", "on_success_job_id", "on_finish_job_id"
    ):
        assert success_job == callback_ids[("wf.batch_record", str(batch_id))]
        assert finish_job == callback_ids[("wf.batch_done", str(batch_id))]
    assert {f"callback {batch.id}" for batch in batches} <= set(first)
    fan_ins = check_counts(batches)
    nodes = sum(1 for label in upstream_of if label.startswith("w"))
    releases = sum(1 for label, ups in upstream_of.items() if ups)
    # Every dependent the DAGs were built with has its edges (all met, checked above), and
    # its job landed one completion: each release fired, once (a second release of a
    # finished node would have run it again and landed a second completion).
    assert fan_ins == releases
    reruns = len(lines) - len(first)
    completions = sum(len(log) for _, _, log, _, _ in jobs)
    # Jobs with two job_succeeded events (asserted 0 above; a worker SIGKILLed between
    # its commit and its event leaves one with none, so the events are not counted up).
    succeeded = Counter(n for (name, _), n in counts.items() if name == "job_succeeded")
    duplicates = sum(n for times, n in succeeded.items() if times > 1)
    print(
        f"\nworkflow chaos summary on {connection.vendor} (seed {seed}, scale {SCALE}): "
        f"workflows={WORKFLOWS} nodes={nodes} batches={BATCHES} "
        f"members={len(upstream_of) - nodes} jobs={len(jobs)} sigkills={sigkills} "
        f"killed_sessions={session_kills} session_kill_rounds={faults.kill_rounds} "
        f"runs={len(lines)} reruns={reruns} "
        f"completions={completions} succeeded_events={succeeded[1]} fan_ins_fired={fan_ins} "
        f"callbacks_fired={sum(fired_for.values())}/{callbacks} duplicates={duplicates}"
    )


def check_counts(batches: list[Batch]) -> int:
    """Check the stored counts against what was built; return the dependents released.

    Every edge is met (none left open, none unmet: no upstream was taken for failed;
    a sole edge met is not written, ``edge_states`` derives it).
    Each workflow's counter shards sum to exactly its ``node_count`` with none dead or
    cancelled, and each batch's to exactly its ``total`` succeeded: a completion that
    landed twice, or a release seen by two upstreams as the last, adds one too many.
    """
    assert set(edge_states("default", Job).values()) <= {EdgeState.MET}
    finished = {
        run_id: (done, dead, cancelled)
        for run_id, done, dead, cancelled in WorkflowCounter.objects.values("workflow_id")
        .annotate(Sum("finished"), Sum("dead"), Sum("cancelled"))
        .values_list("workflow_id", "finished__sum", "dead__sum", "cancelled__sum")
    }
    built = dict(WorkflowRun.objects.values_list("id", "node_count"))
    assert finished == {run_id: (count, 0, 0) for run_id, count in built.items()}
    counted = {
        batch_id: (done, dead, cancelled)
        for batch_id, done, dead, cancelled in BatchCounter.objects.values("batch_id")
        .annotate(Sum("succeeded"), Sum("dead"), Sum("cancelled"))
        .values_list("batch_id", "succeeded__sum", "dead__sum", "cancelled__sum")
    }
    totals = dict(
        BatchRun.objects.filter(id__in=[b.id for b in batches]).values_list("id", "total")
    )
    assert counted == {batch_id: (total, 0, 0) for batch_id, total in totals.items()}
    assert not BatchRun.objects.filter(fired_at__isnull=True).exists()
    return WorkflowEdge.objects.values("downstream_id").distinct().count()
