"""A stateful model of workflows: random DAGs driven through the manager, checked every step.

Hypothesis draws a DAG (each node waits for a random set of earlier nodes, with a
random ``when``), enqueues it, then writes programs of claims, fenced completions
(succeeded, dead, retry; one by one or two in one batch) under the current or a
stale claim token, leases aged on the database and swept, operator cancels,
requeues of dead nodes, snoozes (``raise Snooze``, through the worker's own
``snooze_completion``) under the current or a stale token, and a cancel of the
whole workflow. A small in-memory model says what each step must do; after every
step each node's status, and the attempts it has used, must be the model's, and
so must the workflow row's ``outcome`` (empty until its last node finishes; read
by the metrics without scanning nodes). Invariants: no waiting node has all its
dependencies met (it would have been released), a cancelled dependent of a
finished upstream is explained, and a stale token never changes anything.

Profiles: ``tests/properties/conftest.py`` (``ARCATURE_SOAK=1`` for the long run).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from django.db.models import F
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from django_arcature import Workflow
from django_arcature.core.decide import HandlerError
from django_arcature.db import ClaimedJob
from django_arcature.models import Job
from django_arcature.transitions import ClaimTransition, Completion
from django_arcature.worker.dispatch import snooze_completion
from django_arcature.workflows.build import Node
from django_arcature.workflows.models import WorkflowRun
from tests.properties.conftest import TALLY
from tests.testapp import workflow_jobs as wf

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.django_db(transaction=True)]

TALLY_NAME = "workflow model"
MAX_ATTEMPTS = 2
MET_BY: dict[str, tuple[str, ...]] = {
    "succeeded": ("succeeded", "always"),
    "dead": ("failed", "always"),
    "cancelled": ("always",),
}

dags = st.integers(min_value=2, max_value=7).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(
            st.tuples(
                st.sets(st.integers(0, 6), max_size=3),
                st.sampled_from(("succeeded", "succeeded", "failed", "always")),
            ),
            min_size=n,
            max_size=n,
        ),
    )
)


class WorkflowModel(RuleBasedStateMachine):
    @initialize(dag=dags)
    def build(self, dag: tuple[int, list[tuple[set[int], str]]]) -> None:
        Job.objects.all().delete()
        n, shape = dag
        self.deps: list[list[int]] = [
            sorted(d for d in ups if d < i) for i, (ups, _) in enumerate(shape)
        ]
        self.when = [w if self.deps[i] else "succeeded" for i, (_, w) in enumerate(shape)]
        flow = Workflow("model")
        nodes: list[Node] = []
        for i in range(n):
            nodes.append(
                flow.add(
                    wf.step.using(max_attempts=MAX_ATTEMPTS),
                    f"n{i}",
                    after=[nodes[d] for d in self.deps[i]],
                    when=self.when[i],
                )
            )
        flow.enqueue()
        self.flow = flow
        self.ids = [node.job_id for node in nodes]
        self.status = ["waiting" if self.deps[i] else "pending" for i in range(n)]
        self.attempts = [0] * n
        self.edge = {(u, d): "open" for d in range(n) for u in self.deps[d]}
        self.cancelled_by: dict[int, int | None] = {}
        self.tokens: dict[int, uuid.UUID] = {}
        self.claims: dict[int, ClaimedJob] = {}
        self.stale: list[tuple[int, uuid.UUID]] = []
        #: Nodes an operator cancelled (not those let go by an upstream's outcome).
        self.operator_cancelled: set[int] = set()
        self.workflow_cancelled = False
        self.steps = 0
        TALLY.setdefault(TALLY_NAME, Counter())["examples"] += 1

    # --- the model ---------------------------------------------------------------------

    def dependents(self, u: int) -> list[int]:
        return [d for d in range(len(self.deps)) if u in self.deps[d]]

    def finish(self, first: int, outcome: str) -> None:
        frontier = {first: outcome}
        while frontier:
            for u, o in frontier.items():
                for d in self.dependents(u):
                    if self.edge[(u, d)] == "open":
                        self.edge[(u, d)] = "met" if self.when[d] in MET_BY[o] else "unmet"
            decided: dict[int, str] = {}
            for u in frontier:
                for d in self.dependents(u):
                    if self.status[d] != "waiting" or d in decided:
                        continue
                    states = [self.edge[(x, d)] for x in self.deps[d]]
                    if "unmet" in states:
                        self.status[d] = "cancelled"
                        self.cancelled_by[d] = next(
                            x for x in self.deps[d] if self.edge[(x, d)] == "unmet"
                        )
                        decided[d] = "cancelled"
                    elif all(s == "met" for s in states):
                        self.status[d] = "pending"
                        decided[d] = "released"
            frontier = {d: "cancelled" for d, what in decided.items() if what == "cancelled"}

    def resume(self, root: int) -> None:
        closure: set[int] = set()
        level = {root}
        while level:
            level = {
                d
                for d, cause in self.cancelled_by.items()
                if cause in level and self.status[d] == "cancelled"
            } - closure
            closure |= level
        back = {root}
        for d in sorted(closure):  # node order is a dependency order
            blockers = [x for x in self.deps[d] if self.edge[(x, d)] == "unmet" and x not in back]
            if blockers:
                self.cancelled_by[d] = blockers[0]
            else:
                back.add(d)
                self.status[d] = "waiting"
                self.cancelled_by[d] = None
        for (u, d), _ in list(self.edge.items()):
            if u in back and self.status[d] in ("waiting", "cancelled"):
                self.edge[(u, d)] = "open"

    def step(self) -> None:
        TALLY[TALLY_NAME]["steps"] += 1
        self.steps += 1

    def pick(self, pick: int, *states: str) -> int:
        """A node in one of ``states`` if there is one (else any node): programs reach
        deep states instead of mostly refused steps."""
        eligible = [i for i, state in enumerate(self.status) if state in states]
        return eligible[pick % len(eligible)] if eligible else pick % len(self.ids)

    # --- rules -------------------------------------------------------------------------

    @rule(i=st.integers(0, 6))
    def claim(self, i: int) -> None:
        i = self.pick(i, "pending")
        claimed = Job.objects.claim_job(self.ids[i], "w", 60)
        if self.status[i] != "pending":
            assert claimed is None
            self.step()
            return
        assert claimed is not None
        if i in self.tokens:
            self.stale.append((i, self.tokens[i]))
        self.tokens[i] = claimed.claim_token
        self.claims[i] = claimed
        self.status[i] = "running"
        self.attempts[i] += 1
        self.step()

    def land(self, i: int, kind: str) -> None:
        del self.tokens[i]
        if kind == "retry":
            self.status[i] = "pending"
            return
        self.status[i] = kind
        self.finish(i, kind)

    @rule(i=st.integers(0, 6), kind=st.sampled_from(["succeeded", "dead", "dead", "retry"]))
    def complete(self, i: int, kind: str) -> None:
        i = self.pick(i, "running")
        if self.status[i] != "running":
            self.step()
            return
        completion = _completion(self.ids[i], self.tokens[i], kind)
        assert Job.objects.complete_many([completion]) == [ClaimTransition.UPDATED]
        self.land(i, kind)
        self.step()

    @rule(
        kinds=st.tuples(
            st.sampled_from(["succeeded", "dead"]), st.sampled_from(["succeeded", "dead"])
        )
    )
    def complete_two_in_one_batch(self, kinds: tuple[str, str]) -> None:
        running = [i for i in range(len(self.ids)) if self.status[i] == "running"][:2]
        if len(running) < 2:
            self.step()
            return
        batch = [
            _completion(self.ids[i], self.tokens[i], k) for i, k in zip(running, kinds, strict=True)
        ]
        assert Job.objects.complete_batch(batch) == [ClaimTransition.UPDATED] * 2
        for i, kind in zip(running, kinds, strict=True):
            self.land(i, kind)
        self.step()

    @rule(i=st.integers(0, 6), stale=st.booleans())
    def snooze(self, i: int, stale: bool) -> None:
        """``raise Snooze(0)``: back to pending with its attempt given back; a stale
        claim's snooze is fenced out like any completion."""
        i = self.pick(i, "running")
        if self.status[i] != "running":
            self.step()
            return
        claimed = self.claims[i]
        if stale:
            olds = [token for node, token in self.stale if node == i]
            if not olds:
                self.step()
                return
            claimed = dataclasses.replace(claimed, claim_token=olds[-1])
        snoozed = snooze_completion(claimed, HandlerError("later", snooze=0.0), worker_id="w")
        assert isinstance(snoozed, Completion)
        written = Job.objects.complete_many([snoozed])
        if stale:
            assert written == [ClaimTransition.LOST]
        else:
            assert written == [ClaimTransition.UPDATED]
            del self.tokens[i]
            self.status[i] = "pending"
            self.attempts[i] -= 1
        self.step()

    @precondition(lambda self: bool(self.stale) and self.steps % 3 == 0)
    @rule(pick=st.integers(0, 20), kind=st.sampled_from(["succeeded", "dead", "retry"]))
    def complete_with_a_stale_token(self, pick: int, kind: str) -> None:
        if not self.stale:
            self.step()
            return
        i, token = self.stale[pick % len(self.stale)]
        assert Job.objects.complete_many([_completion(self.ids[i], token, kind)]) == [
            ClaimTransition.LOST
        ]
        self.step()

    @rule(i=st.integers(0, 6))
    def expire_and_sweep(self, i: int) -> None:
        i = self.pick(i, "running")
        if self.status[i] != "running":
            self.step()
            return
        Job.objects.filter(pk=self.ids[i]).update(
            lease_expires_at=F("locked_at") - timedelta(days=1)
        )
        assert Job.objects.sweep_expired_leases(10) == 1
        self.stale.append((i, self.tokens.pop(i)))
        if self.attempts[i] >= MAX_ATTEMPTS:
            self.status[i] = "dead"
            self.finish(i, "dead")
        else:
            self.status[i] = "pending"
        self.step()

    @precondition(lambda self: self.steps % 5 == 4)  # now and then, or nothing else runs
    @rule(i=st.integers(0, 6))
    def cancel(self, i: int) -> None:
        i = self.pick(i, "waiting", "pending", "running")
        rows = Job.objects.cancel(self.ids[i])
        if self.status[i] not in ("waiting", "pending", "running"):
            assert rows == 0
            self.step()
            return
        assert rows == 1
        if self.status[i] == "running":
            self.stale.append((i, self.tokens.pop(i)))
        self.status[i] = "cancelled"
        self.operator_cancelled.add(i)
        self.finish(i, "cancelled")
        self.step()

    @rule(i=st.integers(0, 6))
    def requeue(self, i: int) -> None:
        i = self.pick(i, "dead")
        rows = Job.objects.requeue_dead(self.ids[i])
        if self.status[i] != "dead":
            assert rows == 0
            self.step()
            return
        assert rows == 1
        self.status[i] = "pending"
        self.attempts[i] = 0
        if not self.workflow_cancelled:
            self.resume(i)
        self.step()

    def expected_outcome(self) -> str:
        if self.workflow_cancelled:
            return self.frozen_outcome
        if any(state in ("waiting", "pending", "running") for state in self.status):
            return ""
        if "dead" in self.status:
            return "failed"
        if any(self.status[i] == "cancelled" for i in self.operator_cancelled):
            return "cancelled"
        return "succeeded"

    @precondition(lambda self: self.steps >= 30 and not self.workflow_cancelled)
    @rule()
    def cancel_workflow(self) -> None:
        if self.workflow_cancelled:
            self.step()
            return
        # A workflow cancelled in progress reads cancelled; one already finished keeps
        # its outcome; either way it never changes again (requeues included).
        self.frozen_outcome = self.expected_outcome() or "cancelled"
        self.flow.cancel()
        self.workflow_cancelled = True
        for i, state in enumerate(self.status):
            if state in ("waiting", "pending", "running"):
                if state == "running":
                    self.stale.append((i, self.tokens.pop(i)))
                self.status[i] = "cancelled"
        self.step()

    # --- checks ------------------------------------------------------------------------

    @invariant()
    def rows_agree_with_the_model(self) -> None:
        if not hasattr(self, "ids"):
            return
        rows = dict(Job.objects.filter(id__in=self.ids).values_list("id", "status"))
        assert [rows[job_id] for job_id in self.ids] == self.status
        attempts = dict(Job.objects.filter(id__in=self.ids).values_list("id", "attempts"))
        assert [attempts[job_id] for job_id in self.ids] == self.attempts

    @invariant()
    def the_workflow_row_says_whether_it_finished(self) -> None:
        if not hasattr(self, "ids"):
            return
        assert self.flow.run is not None
        run = WorkflowRun.objects.get(pk=self.flow.run.pk)
        assert run.outcome == self.expected_outcome()
        assert (run.finished_at is None) == (run.outcome == "")

    @invariant()
    def no_waiting_node_is_ready(self) -> None:
        if not hasattr(self, "ids") or self.workflow_cancelled:
            return
        for d, state in enumerate(self.status):
            if state == "waiting":
                assert not all(self.edge[(u, d)] == "met" for u in self.deps[d])


def _completion(job_id: uuid.UUID, token: uuid.UUID, kind: str) -> Completion:
    if kind == "succeeded":
        return Completion(job_id, token, "succeeded", result=1)
    if kind == "dead":
        return Completion(job_id, token, "dead", error_kind="permanent", message="no")
    return Completion(job_id, token, "retry", retry_delay=0.0, message="again")


def test_workflows_behave_like_their_model() -> None:
    """Random DAGs and programs agree with the model after every step."""
    from hypothesis.stateful import run_state_machine_as_test

    before = Counter(TALLY.get(TALLY_NAME, Counter()))
    run_state_machine_as_test(WorkflowModel, settings=settings())
    after = TALLY[TALLY_NAME]
    assert after["examples"] > before["examples"]
    assert after["steps"] > before["steps"]
