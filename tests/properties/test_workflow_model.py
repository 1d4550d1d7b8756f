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

The steps a node shares with a batch member are in ``member_programs.py``.

Profiles: ``tests/properties/conftest.py`` (``ARCATURE_SOAK=1`` for the long run).
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from django_arcature import Workflow
from django_arcature.manager.dependencies import edge_states
from django_arcature.models import Job
from django_arcature.transitions import ClaimTransition
from django_arcature.workflows.build import Node
from django_arcature.workflows.models import WorkflowEdge, WorkflowRun
from tests.properties.conftest import PROFILE, TALLY
from tests.properties.member_programs import MAX_ATTEMPTS, MemberMachine, completion
from tests.testapp import workflow_jobs as wf

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.django_db(transaction=True)]

TALLY_NAME = "workflow model"
LIVE = ("waiting", "pending", "running")
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


class WorkflowModel(MemberMachine):
    TALLY_NAME = TALLY_NAME

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
        self.start(
            [node.job_id for node in nodes],
            ["waiting" if self.deps[i] else "pending" for i in range(n)],
        )
        self.edge = {(u, d): "open" for d in range(n) for u in self.deps[d]}
        self.cancelled_by: dict[int, int | None] = {}
        #: Nodes an operator cancelled (not those let go by an upstream's outcome).
        self.operator_cancelled: set[int] = set()
        self.workflow_cancelled = False
        #: Nodes the workflow's cancel took while live (no completion decided their edges).
        self.cancelled_with_the_workflow: set[int] = set()

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

    # --- rules (claim and snooze: MemberMachine) ----------------------------------------

    def land(self, i: int, kind: str) -> None:
        del self.tokens[i]
        if kind == "retry":
            self.status[i] = "pending"
            return
        self.status[i] = kind
        self.finish(i, kind)

    @rule(i=st.integers(0, 6), kind=st.sampled_from(["succeeded", "dead", "dead", "retry"]))
    def complete(self, i: int, kind: str) -> None:
        self.complete_at(i, kind)

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
            completion(self.ids[i], self.tokens[i], k) for i, k in zip(running, kinds, strict=True)
        ]
        assert Job.objects.complete_batch(batch) == [ClaimTransition.UPDATED] * 2
        for i, kind in zip(running, kinds, strict=True):
            self.land(i, kind)
        self.step()

    @precondition(lambda self: bool(self.stale) and self.steps % 3 == 0)
    @rule(pick=st.integers(0, 20), kind=st.sampled_from(["succeeded", "dead", "retry"]))
    def complete_with_a_stale_token(self, pick: int, kind: str) -> None:
        self.complete_stale(pick, kind)

    @rule(i=st.integers(0, 6))
    def expire_and_sweep(self, i: int) -> None:
        expired = self.expire(i)
        if expired is not None and self.status[expired] == "dead":
            self.finish(expired, "dead")
        self.step()

    @precondition(lambda self: self.steps % 5 == 4)  # now and then, or nothing else runs
    @rule(i=st.integers(0, 6))
    def cancel(self, i: int) -> None:
        cancelled = self.cancel_one(i, LIVE)
        if cancelled is not None:
            self.operator_cancelled.add(cancelled)
            self.finish(cancelled, "cancelled")
        self.step()

    @rule(i=st.integers(0, 6))
    def requeue(self, i: int) -> None:
        requeued = self.requeue_one(i)
        if requeued is not None and not self.workflow_cancelled:
            self.resume(requeued)
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
        self.cancelled_with_the_workflow = {i for i, s in enumerate(self.status) if s in LIVE}
        self.cancel_all_live(LIVE)
        self.step()

    # --- checks ------------------------------------------------------------------------

    @invariant()
    def rows_agree_with_the_model(self) -> None:
        if not hasattr(self, "ids"):
            return
        self.statuses_agree()
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
    def edges_read_as_the_model_says(self) -> None:
        """``edge_states`` (an edge stored open read from its upstream's outcome) is
        the model's edge after every step: requeues, reruns in a cancelled workflow
        and sweeps included.

        Left out: the edges from a node the workflow's cancel took. No completion
        decided them (the model keeps them open), but their upstream reads
        cancelled, so they are derived as that outcome decides them: the rows do
        not say whether that cancel ran the cascade, and nothing waits on them.
        """
        if not hasattr(self, "ids"):
            return
        assert self.flow.run is not None
        derived = edge_states("default", Job, self.flow.run.pk)
        index = {job_id: i for i, job_id in enumerate(self.ids)}
        rows = WorkflowEdge.objects.filter(workflow_id=self.flow.run.pk).values_list(
            "id", "upstream_id", "downstream_id"
        )
        for edge_id, up, down in rows:
            u, d = index[up], index[down]
            if u in self.cancelled_with_the_workflow:
                continue
            assert derived[edge_id] == self.edge[(u, d)], (u, d, self.status)

    @invariant()
    def no_waiting_node_is_ready(self) -> None:
        if not hasattr(self, "ids") or self.workflow_cancelled:
            return
        for d, state in enumerate(self.status):
            if state == "waiting":
                assert not all(self.edge[(u, d)] == "met" for u in self.deps[d])


def test_workflows_behave_like_their_model() -> None:
    """Random DAGs and programs agree with the model after every step."""
    from hypothesis.stateful import run_state_machine_as_test

    before = Counter(TALLY.get(TALLY_NAME, Counter()))
    # CI: 40 programs per database (half the CI profile's 80: about 1 s each on
    # SQLite, more on the servers), new ones every run on each of the three
    # databases; ``make soak`` (ARCATURE_SOAK=1) runs the soak profile's 400.
    chosen = settings() if PROFILE == "soak" else settings(max_examples=40)
    run_state_machine_as_test(WorkflowModel, settings=chosen)
    after = TALLY[TALLY_NAME]
    assert after["examples"] > before["examples"]
    assert after["steps"] > before["steps"]
